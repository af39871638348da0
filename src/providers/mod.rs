//! The third-party APIs pidevops talks to, one folder each, whole: GitHub, Linear, Telegram. A provider's
//! folder holds its client, its webhook, its poller, its intake rules and its effects policy; each part implements
//! the narrow trait of the layer it plugs into (`ingress::Webhook`, `intake::rules::SourceRules`,
//! `effects::ProviderPolicy`, `effects::ProviderAction`), and those layers name no provider. This layer sits above
//! them and below the surfaces and start-up, which reach a provider through here.
//!
//! A provider is registered twice, both here in the house: its data in `domain::registry::PROVIDERS` (name,
//! route, secret, badge, links: what every list of providers reads) and its parts in its folder, mounted by
//! [`webhook`], its intake rules listed in [`INTAKE_RULES`], and built by start-up's catalog
//! (`startup/catalog/effects.rs`, its pollers' entries). Each client takes its base URL from configuration (tests
//! point them at local fakes) and bounds every call with a timeout.

pub mod github;
pub mod linear;
pub mod policy;
pub mod telegram;

/// Each provider's intake rules, one entry per source, for `intake::Intake` (start-up hands it these).
pub const INTAKE_RULES: &[SourceRules] = &[
    github::intake::RULES,
    linear::intake::RULES,
    telegram::intake::RULES,
];

use axum::extract::FromRef;
use axum::routing::MethodRouter;

use crate::domain::Source;
use crate::ingress::{handler, Webhooks};
use crate::intake::rules::SourceRules;

/// The webhook that receives `source`'s deliveries, for `ingress::router`; `None` for pidevops's own source.
pub fn webhook<S>(source: Source) -> Option<MethodRouter<S>>
where
    Webhooks: FromRef<S>,
    S: Clone + Send + Sync + 'static,
{
    match source {
        Source::Github => Some(handler::<github::webhook::Delivery, S>()),
        Source::Linear => Some(handler::<linear::webhook::Delivery, S>()),
        Source::Telegram => Some(handler::<telegram::webhook::Delivery, S>()),
        Source::Pidevops => None,
    }
}
