//! The `effects:<provider>` loops, one entry each: why this configuration arms or disables the loop, and its
//! runner built from the service's parts. Adding a provider's effects loop is adding its entry to
//! [`EFFECTS_LOOPS`] (its policy lives in `crate::effects`); the catalog plans and builds them all through one
//! [`super::Entry`].

use anyhow::Context;

use super::{builds, Built, Parts, PlannedLoop};
use crate::config::Settings;
use crate::effects::loop_name;
use crate::effects::runner::Effects;
use crate::loops::LoopState;
use crate::providers::github::effects::GithubPolicy;
use crate::providers::gitlab::effects::GitlabPolicy;
use crate::providers::gitlab::settings::GitlabSettings;
use crate::providers::linear::effects::LinearPolicy;
use crate::providers::slack::effects::SlackPolicy;
use crate::providers::slack::settings::SlackSettings;
use crate::providers::telegram::effects::TelegramPolicy;
use crate::providers::{
    github::settings::GithubSettings, linear::settings::LinearSettings,
    telegram::settings::TelegramSettings,
};

/// One provider's effects loop.
pub(super) struct EffectsLoop {
    /// Its provider's name (`domain::registry::PROVIDERS`).
    pub provider: &'static str,
    /// Armed, or why not.
    pub plan: fn(&Settings) -> PlannedLoop,
    /// Its runner, once the plan armed it.
    pub runner: fn(&Parts<'_>) -> anyhow::Result<Built>,
}

/// Every provider's effects loop, in the order `doctor` prints them.
pub(super) const EFFECTS_LOOPS: &[EffectsLoop] = &[
    EffectsLoop {
        provider: "github",
        plan: github_effects_plan,
        runner: github_effects,
    },
    EffectsLoop {
        provider: "linear",
        plan: linear_effects_plan,
        runner: linear_effects,
    },
    EffectsLoop {
        provider: "telegram",
        plan: telegram_effects_plan,
        runner: telegram_effects,
    },
    EffectsLoop {
        provider: "slack",
        plan: slack_effects_plan,
        runner: slack_effects,
    },
    EffectsLoop {
        provider: "gitlab",
        plan: gitlab_effects_plan,
        runner: gitlab_effects,
    },
];

fn gitlab_effects_plan(s: &Settings) -> PlannedLoop {
    let name = loop_name("gitlab");
    match GitlabSettings::of(s).token {
        Some(_) => PlannedLoop::armed(
            &name,
            true,
            s.projector_interval,
            "opens each GitLab-hosted task's merge request when it goes to review, merges it under land = \"auto\", \
             and notes on the tasks' GitLab issues (GITLAB_URL), once, recorded",
        ),
        None => PlannedLoop::off(
            &name,
            true,
            LoopState::Disabled,
            "GITLAB_TOKEN is not set: GitLab hears nothing back".to_owned(),
            s.projector_interval,
        ),
    }
}

/// The `effects:gitlab` loop's worker: GitLab's REST API at `GITLAB_URL` with `GITLAB_TOKEN`.
fn gitlab_effects(parts: &Parts<'_>) -> anyhow::Result<Built> {
    let settings = parts.settings;
    let gitlab = GitlabSettings::of(settings);
    let token = gitlab
        .token
        .as_ref()
        .context("the loop plan arms effects:gitlab without GITLAB_TOKEN")?;
    let client = crate::providers::gitlab::client::GitlabClient::new(&gitlab.url, token)
        .map_err(|e| anyhow::anyhow!(e))?;
    Ok(builds::effects(
        Effects::new(
            GitlabPolicy::new(client, policy_config(settings))
                .with_bot(gitlab.intake.bot_username.clone()),
            parts.log.clone(),
            parts.board.clone(),
        )
        .with_cap(settings.file.effect_cap),
    ))
}

/// What the code hosts' policies know of the deployment: each repository's base, code host, draft and
/// delete_branch settings, which ones pidevops's git lands, and how plans land.
fn policy_config(settings: &Settings) -> crate::effects::PolicyConfig {
    let file = &settings.file;
    crate::effects::PolicyConfig {
        bases: file
            .dispatch
            .repos
            .iter()
            .map(|(repo, source)| (repo.clone(), source.base.clone()))
            .collect(),
        plan_land: file.plans.land,
        hosts: file.intake.code_hosts.clone(),
        drafts: file
            .tables()
            .repos
            .iter()
            .filter(|(_, table)| table.draft == Some(true))
            .filter_map(|(name, _)| name.parse().ok())
            .collect(),
        kept_branches: file
            .tables()
            .repos
            .iter()
            .filter(|(_, table)| table.delete_branch == Some(false))
            .filter_map(|(name, _)| name.parse().ok())
            .collect(),
        landed_by_git: file
            .dispatch
            .repos
            .iter()
            .filter(|(_, source)| !source.on_github() && !source.on_gitlab())
            .map(|(repo, _)| repo.clone())
            .collect(),
        ..Default::default()
    }
}

/// The catalog entry's plan: each provider's loop.
pub(super) fn plan(s: &Settings) -> Vec<PlannedLoop> {
    EFFECTS_LOOPS.iter().map(|e| (e.plan)(s)).collect()
}

/// The catalog entry's build: the runner of the provider whose loop this is.
pub(super) fn build(parts: &Parts<'_>, planned: &PlannedLoop) -> anyhow::Result<Built> {
    let entry = EFFECTS_LOOPS
        .iter()
        .find(|e| loop_name(e.provider) == planned.name)
        .with_context(|| format!("{} is not an effects loop", planned.name))?;
    (entry.runner)(parts).map(Built::follows_log)
}

fn github_effects_plan(s: &Settings) -> PlannedLoop {
    let name = loop_name("github");
    match GithubSettings::of(s).token {
        Some(_) => PlannedLoop::armed(
            &name,
            true,
            s.projector_interval,
            "opens each task's pull request when it goes to review (GITHUB_API_URL), once, recorded",
        ),
        None => PlannedLoop::off(
            &name,
            true,
            LoopState::Disabled,
            "GITHUB_TOKEN is not set: no pull requests are opened".to_owned(),
            s.projector_interval,
        ),
    }
}

/// The `effects:github` loop's worker: GitHub at `GITHUB_API_URL` with `GITHUB_TOKEN`, pull requests to each
/// repository's base branch.
fn github_effects(parts: &Parts<'_>) -> anyhow::Result<Built> {
    let settings = parts.settings;
    let github = GithubSettings::of(settings);
    let token = github
        .token
        .as_ref()
        .context("the loop plan arms effects:github without GITHUB_TOKEN")?;
    let client = crate::providers::github::GithubClient::new(&github.api_url, token)
        .map_err(|e| anyhow::anyhow!(e))?;
    let policy = GithubPolicy::new(
        client,
        policy_config(settings),
        github.intake.bot_login.clone(),
    );
    Ok(builds::effects(
        Effects::new(policy, parts.log.clone(), parts.board.clone())
            .with_cap(settings.file.effect_cap),
    ))
}

fn linear_effects_plan(s: &Settings) -> PlannedLoop {
    let name = loop_name("linear");
    match &LinearSettings::of(s).api_key {
        Some(_) => PlannedLoop::armed(
            &name,
            true,
            s.projector_interval,
            "comments on and moves the tasks' Linear issues, and speaks in Linear agent sessions (LINEAR_API_URL)",
        ),
        None => PlannedLoop::off(
            &name,
            true,
            LoopState::Disabled,
            "LINEAR_API_KEY is not set: Linear hears nothing back".to_owned(),
            s.projector_interval,
        ),
    }
}

/// The `effects:linear` loop's worker: Linear's GraphQL API at `LINEAR_API_URL` with `LINEAR_API_KEY`, issues
/// moved through `[linear.states]`.
fn linear_effects(parts: &Parts<'_>) -> anyhow::Result<Built> {
    let settings = parts.settings;
    let linear = LinearSettings::of(settings);
    let key = linear
        .api_key
        .as_ref()
        .context("the loop plan arms effects:linear without LINEAR_API_KEY")?;
    let client = crate::providers::linear::LinearClient::new(&linear.api_url, key)
        .map_err(|e| anyhow::anyhow!(e))?;
    let policy = LinearPolicy::new(
        client,
        crate::effects::PolicyConfig {
            pull_requests: github_effects_plan(settings).state == LoopState::Armed,
            ..Default::default()
        },
        linear.states,
    );
    Ok(builds::effects(
        Effects::new(policy, parts.log.clone(), parts.board.clone())
            .with_cap(settings.file.effect_cap),
    ))
}

fn telegram_effects_plan(s: &Settings) -> PlannedLoop {
    let name = loop_name("telegram");
    let telegram = TelegramSettings::of(s);
    match (&telegram.bot_token, !telegram.allowed_chats.is_empty()) {
        (Some(_), true) => PlannedLoop::armed(
            &name,
            true,
            s.projector_interval,
            if telegram.allowed_users.is_some() {
                "tells TELEGRAM_ALLOWED_CHATS when a task waits for approval, needs a human, is in review, done or cancelled; only TELEGRAM_ALLOWED_USERS can command"
            } else {
                "tells TELEGRAM_ALLOWED_CHATS when a task waits for approval, needs a human, is in review, done or cancelled; any member of an allowed group can command (TELEGRAM_ALLOWED_USERS is not set)"
            },
        ),
        (None, _) => PlannedLoop::off(
            &name,
            true,
            LoopState::Disabled,
            "TELEGRAM_BOT_TOKEN is not set: no Telegram messages".to_owned(),
            s.projector_interval,
        ),
        (Some(_), false) => PlannedLoop::off(
            &name,
            true,
            LoopState::Disabled,
            "TELEGRAM_ALLOWED_CHATS is not set: no chat to tell".to_owned(),
            s.projector_interval,
        ),
    }
}

/// The `effects:telegram` loop's worker: the Bot API at `TELEGRAM_API_URL`, notifications to the allowed chats.
fn telegram_effects(parts: &Parts<'_>) -> anyhow::Result<Built> {
    let settings = parts.settings;
    let telegram = TelegramSettings::of(settings);
    let token = telegram
        .bot_token
        .as_ref()
        .context("the loop plan arms effects:telegram without TELEGRAM_BOT_TOKEN")?;
    let client = crate::providers::telegram::TelegramClient::new(&telegram.api_url, token)
        .map_err(|e| anyhow::anyhow!(e))?;
    let policy = TelegramPolicy::new(client, telegram);
    Ok(builds::effects(
        Effects::new(policy, parts.log.clone(), parts.board.clone())
            .with_cap(settings.file.effect_cap)
            .with_loops(parts.registry.clone()),
    ))
}

fn slack_effects_plan(s: &Settings) -> PlannedLoop {
    let name = loop_name("slack");
    match SlackSettings::of(s).bot_token {
        Some(_) => PlannedLoop::armed(
            &name,
            true,
            s.projector_interval,
            "tells each Slack task's story in its thread (SLACK_API_URL); only SLACK_ALLOWED_USERS may press its buttons",
        ),
        None => PlannedLoop::off(
            &name,
            true,
            LoopState::Disabled,
            "SLACK_BOT_TOKEN is not set: Slack hears nothing back".to_owned(),
            s.projector_interval,
        ),
    }
}

/// The `effects:slack` loop's worker: the Web API at `SLACK_API_URL` with `SLACK_BOT_TOKEN`.
fn slack_effects(parts: &Parts<'_>) -> anyhow::Result<Built> {
    let settings = parts.settings;
    let slack = SlackSettings::of(settings);
    let token = slack
        .bot_token
        .as_ref()
        .context("the loop plan arms effects:slack without SLACK_BOT_TOKEN")?;
    let client = crate::providers::slack::SlackClient::new(&slack.api_url, token)
        .map_err(|e| anyhow::anyhow!(e))?;
    let policy = SlackPolicy::new(client, slack);
    Ok(builds::effects(
        Effects::new(policy, parts.log.clone(), parts.board.clone())
            .with_cap(settings.file.effect_cap),
    ))
}
