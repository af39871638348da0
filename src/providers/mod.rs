//! The third-party APIs pidevops talks to, one folder each, whole: GitHub, Linear, Telegram, Slack, GitLab. A provider's
//! folder holds its client, its webhook, its settings, its poller, its intake rules and its effects policy; each
//! part implements the narrow trait of the layer it plugs into (`ingress::Webhook`, `intake::rules::SourceRules`,
//! `effects::ProviderPolicy`, `effects::ProviderAction`), and those layers name no provider. This layer sits above
//! them and below the surfaces and start-up, which reach a provider through here.
//!
//! A provider is registered twice, both here in the house: its data in `domain::registry::PROVIDERS` (name,
//! route, secret, badge, links: what every list of providers reads) and its parts in its folder, mounted by
//! [`webhook`], its intake rules built by [`intake_rules`] with its settings, a code host's reactions by
//! [`reaction_rules`], and built by start-up's catalog
//! (`startup/catalog/effects.rs`, its pollers' entries). Each client takes its base URL from configuration (tests
//! point them at local fakes) and bounds every call with a timeout.

pub mod github;
pub mod gitlab;
pub mod linear;
pub mod policy;
pub mod slack;
pub mod telegram;

use axum::extract::FromRef;
use axum::routing::MethodRouter;

use crate::domain::Source;
use crate::ingress::{handler, Webhooks};
use crate::intake::rules::SourceRules;
use crate::reactions::HostRules;
use std::sync::Arc;

/// Each provider's intake rules, one per source, each with its provider's own settings, for `intake::Intake`
/// (start-up hands it these).
pub fn intake_rules(settings: &crate::config::Settings) -> Vec<Box<dyn SourceRules>> {
    vec![
        Box::new(github::intake::rules(
            github::settings::GithubSettings::of(settings).intake,
        )),
        Box::new(linear::intake::rules(
            linear::settings::LinearSettings::of(settings).intake,
        )),
        Box::new(telegram::intake::rules(
            telegram::settings::TelegramSettings::of(settings),
        )),
        Box::new(slack::intake::rules(
            slack::settings::SlackSettings::of(settings).intake,
        )),
        Box::new(gitlab::intake::rules(
            gitlab::settings::GitlabSettings::of(settings).intake,
        )),
    ]
}

/// Each code host's reactions, one per source, each with its provider's own settings (whom it trusts, its own
/// account, its client), for `reactions::Reactions` (start-up hands it these).
pub fn reaction_rules(settings: &crate::config::Settings) -> Vec<Arc<dyn HostRules>> {
    let github = github::settings::GithubSettings::of(settings).intake;
    vec![
        Arc::new(github::reactions::GithubReactions {
            bot_login: github.bot_login,
            trusted: github.associations,
        }),
        Arc::new(gitlab::reactions::GitlabReactions::new(
            gitlab::settings::GitlabSettings::of(settings),
        )),
    ]
}

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
        Source::Slack => Some(handler::<slack::webhook::Delivery, S>()),
        Source::Gitlab => Some(handler::<gitlab::webhook::Delivery, S>()),
        Source::Pidevops => None,
    }
}

/// Where one of doctor's provider lines stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckState {
    Pass,
    /// Enabled and cannot run: doctor fails.
    Fail,
    /// Works, with something an operator should see (a webhook missing: the poller covers it, later).
    Warn,
    /// Not configured: said why, never a failure.
    Disabled,
}

impl CheckState {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckState::Pass => "pass",
            CheckState::Fail => "FAIL",
            CheckState::Warn => "warn",
            CheckState::Disabled => "disabled",
        }
    }
}

/// One line of doctor's report about a provider: its label (`github api`), where it stands, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckLine {
    pub label: String,
    pub state: CheckState,
    pub detail: String,
}

impl CheckLine {
    fn new(label: impl Into<String>, state: CheckState, detail: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            state,
            detail: detail.into(),
        }
    }

    /// A read-only call's outcome at `url`: it answered (`detail` says what), or why not.
    fn answered(label: &str, url: &str, checked: Result<String, String>) -> Self {
        match checked {
            Ok(detail) => Self::new(label, CheckState::Pass, format!("{url} answers; {detail}")),
            Err(e) => Self::new(label, CheckState::Fail, format!("{url}: {e}")),
        }
    }
}

/// Every provider's read-only API check for `doctor`, in the table's order: each provider's own (`doctor.rs` in
/// its folder), with its credential from `settings`; a provider without one is `disabled`, saying why.
pub async fn api_checks(settings: &crate::config::Settings) -> Vec<CheckLine> {
    let mut lines = github::doctor::check(settings).await;
    lines.extend(linear::doctor::check(settings).await);
    lines.extend(telegram::doctor::check(settings).await);
    lines.extend(slack::doctor::check(settings).await);
    lines.extend(gitlab::doctor::check(settings).await);
    lines
}

/// A provider's read-only check, bounded: a hung API is a failed check, not a hung doctor.
async fn within_10s<T>(
    call: impl std::future::Future<Output = Result<T, crate::effects::CallError>>,
) -> Result<T, String> {
    match tokio::time::timeout(std::time::Duration::from_secs(10), call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 10 s".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::registry::PROVIDERS;

    #[test]
    fn every_provider_in_the_table_has_its_webhook_and_its_intake_rules_once() {
        let all_rules = intake_rules(&crate::config::Settings::for_tests(
            crate::config::DatabaseUrl::Sqlite(":memory:".into()),
        ));
        for provider in PROVIDERS {
            assert!(
                webhook::<Webhooks>(provider.source).is_some(),
                "{} has no webhook in providers::webhook",
                provider.name
            );
            let rules = all_rules
                .iter()
                .filter(|r| r.source() == provider.source)
                .count();
            assert_eq!(
                rules, 1,
                "{} has {rules} entries in intake_rules",
                provider.name
            );
        }
        assert_eq!(
            all_rules.len(),
            PROVIDERS.len(),
            "intake_rules names a source that is not in the provider table"
        );
        assert!(webhook::<Webhooks>(Source::Pidevops).is_none());
    }
}
