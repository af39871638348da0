//! The pure halves of the catalog's entries that take more than a line: why a configuration arms, disables or
//! unarms a loop.

use std::time::Duration;

use super::{PlannedLoop, SLACK_SOCKET_INTERVAL, TELEGRAM_POLL};
use crate::config::Settings;
use crate::loops::LoopState;
use crate::providers::slack::settings::SlackSettings;
use crate::providers::telegram::settings::TelegramSettings;

pub(super) fn telegram_updates(s: &Settings) -> PlannedLoop {
    use crate::providers::telegram::updates::TELEGRAM_UPDATES;
    match (
        &TelegramSettings::of(s).bot_token,
        s.webhook_secrets.is_set("telegram"),
    ) {
        (Some(_), false) => PlannedLoop::armed(
            TELEGRAM_UPDATES,
            true,
            TELEGRAM_POLL,
            "long-polls getUpdates (no webhook: TELEGRAM_WEBHOOK_SECRET is not set) into the log",
        ),
        (Some(_), true) => PlannedLoop::off(
            TELEGRAM_UPDATES,
            true,
            LoopState::Disabled,
            "webhook mode: TELEGRAM_WEBHOOK_SECRET is set, so updates come to /webhooks/telegram"
                .to_owned(),
            TELEGRAM_POLL,
        ),
        (None, _) => PlannedLoop::off(
            TELEGRAM_UPDATES,
            true,
            LoopState::Disabled,
            "TELEGRAM_BOT_TOKEN is not set".to_owned(),
            TELEGRAM_POLL,
        ),
    }
}

/// The `slack_socket` loop: armed with an app-level token; without one Slack's events come to the signed webhook.
pub(super) fn slack_socket(s: &Settings) -> PlannedLoop {
    use crate::providers::slack::socket::SLACK_SOCKET;
    // Not a singleton: Slack spreads an app's envelopes over its open sockets (up to ten) and the dedup key keeps
    // each event once, while a socket open on a replica that lost a lease would swallow envelopes until Slack
    // gave up on their acks.
    match SlackSettings::of(s).app_token {
        Some(_) => PlannedLoop::armed(
            SLACK_SOCKET,
            false,
            SLACK_SOCKET_INTERVAL,
            "keeps Slack's Socket Mode websocket open (SLACK_APP_TOKEN) and appends each envelope's event before acking it",
        ),
        None => PlannedLoop::off(
            SLACK_SOCKET,
            false,
            LoopState::Disabled,
            "SLACK_APP_TOKEN is not set: Slack's events arrive at /webhooks/slack".to_owned(),
            SLACK_SOCKET_INTERVAL,
        ),
    }
}

pub(super) fn cron_plan(s: &Settings) -> PlannedLoop {
    use crate::cron::CRON;
    let digests_without_telegram = |list: &[crate::cron::Schedule]| {
        let digest = list
            .iter()
            .find(|s| s.action == crate::cron::ScheduleAction::Digest)?;
        let telegram = TelegramSettings::of(s);
        let missing = match (&telegram.bot_token, !telegram.allowed_chats.is_empty()) {
            (None, _) => "TELEGRAM_BOT_TOKEN is not set",
            (Some(_), false) => "TELEGRAM_ALLOWED_CHATS is not set",
            (Some(_), true) => return None,
        };
        Some(format!(
            "schedule {:?} sends a digest to Telegram, but {missing}",
            digest.name
        ))
    };
    let unarmed =
        |reason| PlannedLoop::off(CRON, true, LoopState::Unarmed, reason, s.projector_interval);
    let list = &s.file.schedules;
    match digests_without_telegram(list) {
            Some(reason) => unarmed(reason),
            None if !list.is_empty() => PlannedLoop::armed(
                CRON,
                true,
                s.projector_interval,
                "creates the tasks of [[schedules]] and sends digests on time; after downtime each overdue schedule fires once",
            ),
            None => PlannedLoop::off(
                CRON,
                true,
                LoopState::Disabled,
                "no [[schedules]] in pidevops.toml".to_owned(),
                s.projector_interval,
            ),
    }
}

/// A poller: armed with its credential; asked for (`[pollers.<name>]`) without it, `unarmed`, since missed
/// webhooks would go unnoticed; neither, disabled.
pub(super) fn poller_loop(
    name: &str,
    config: &crate::pollers::PollerConfig,
    credential: bool,
    variable: &str,
    what: &'static str,
) -> PlannedLoop {
    // `linear_poller` is configured under `[pollers.linear]`.
    let table = name.trim_end_matches("_poller");
    let planned = |state, reason: Option<String>, interval| PlannedLoop {
        name: name.to_owned(),
        singleton: true,
        state,
        reason,
        interval,
        what: if state == LoopState::Armed { what } else { "" },
    };
    match config {
        config if !config.enabled => planned(
            LoopState::Disabled,
            Some(format!("pollers.{table}.enabled is false")),
            config.interval,
        ),
        config if credential => planned(LoopState::Armed, None, config.interval),
        config if config.configured => planned(
            LoopState::Unarmed,
            Some(format!(
                "[pollers.{table}] is set but {variable} is not: missed webhooks would go unnoticed"
            )),
            config.interval,
        ),
        config => planned(
            LoopState::Disabled,
            Some(format!("{variable} is not set")),
            config.interval,
        ),
    }
}

/// The `gitlab_poller` loop: a poller like the others (`GITLAB_TOKEN`), and only when pidevops works on a GitLab
/// project: without one there is nothing to ask about.
pub(super) fn gitlab_poller(s: &Settings) -> PlannedLoop {
    use crate::providers::gitlab::poller::GITLAB_POLLER;
    use crate::providers::gitlab::settings::GitlabSettings;
    let gitlab = GitlabSettings::of(s);
    let config = &s.file.gitlab_poller;
    if config.enabled && gitlab.projects.is_empty() {
        return PlannedLoop::off(
            GITLAB_POLLER,
            true,
            LoopState::Disabled,
            "no GitLab repository: no [repos] entry has provider = \"gitlab\"".to_owned(),
            config.interval,
        );
    }
    poller_loop(
        GITLAB_POLLER,
        config,
        gitlab.token.is_some(),
        "GITLAB_TOKEN",
        "asks GitLab for each project's merge requests changed since the last poll and appends a task's merge or close the webhook missed; reads the base branch of each project with a merge request in review that refreshes (moved) and its merge requests' detailed_merge_status (need_rebase, conflict; refresh = \"off\" too, which only marks the board)",
    )
}

/// The `combine` loop: armed with `[plans] land = "combined"` where this process dispatches (its mirrors).
pub(super) fn combine_plan(settings: &Settings) -> Vec<PlannedLoop> {
    use crate::tasks::PlanLand;
    let name = crate::plans::combine::COMBINE;
    let interval = settings.projector_interval;
    let off = |reason: String| {
        vec![PlannedLoop::off(
            name,
            true,
            LoopState::Disabled,
            reason,
            interval,
        )]
    };
    if settings.file.plans.land != PlanLand::Combined {
        return off("[plans] land = \"separate\": each item gets its own pull request".into());
    }
    if let Some(why) = &settings.file.dispatch.off {
        return off(format!(
            "dispatch is off ({why}): combined plans need its mirrors"
        ));
    }
    vec![PlannedLoop::armed(
        name,
        true,
        interval,
        "merges a combined plan's items at their recorded commits into pidevops/<plan> once all are in review, pushes it and records it on the plan",
    )]
}

/// The `refresh` loop: armed when dispatch is on and a refreshing repository's host takes pidevops's push (a
/// GitHub repository with `GITHUB_TOKEN`, a GitLab-hosted one with `GITLAB_TOKEN`), unless every configured
/// repository sets `refresh = "off"` or lives on neither host; a repository not configured is on GitHub and
/// refreshes (the defaults).
pub(super) fn refresh_plan(settings: &Settings) -> Vec<PlannedLoop> {
    use crate::tasks::RefreshMode;
    let name = crate::landing::refresh::REFRESH;
    let interval = settings.projector_interval;
    let off = |state, reason: String| vec![PlannedLoop::off(name, true, state, reason, interval)];
    if let Some(why) = &settings.file.dispatch.off {
        return off(LoopState::Disabled, format!("dispatch is off: {why}"));
    }
    let configured = &settings.file.dispatch.repos;
    use crate::config::dispatch::RepoSource;
    let refreshing = |on: fn(&RepoSource) -> bool| {
        configured.iter().any(|(repo, source)| {
            on(source) && settings.file.board.land_for(repo).refresh != RefreshMode::Off
        })
    };
    let github = configured.is_empty() || refreshing(RepoSource::on_github);
    let gitlab = refreshing(RepoSource::on_gitlab);
    if !github && !gitlab {
        return off(
            LoopState::Disabled,
            "no repository on GitHub or GitLab refreshes its review requests (each is refresh = \"off\" or elsewhere)"
                .into(),
        );
    }
    let github_token = crate::providers::github::settings::GithubSettings::of(settings)
        .token
        .is_some();
    let gitlab_token = crate::providers::gitlab::settings::GitlabSettings::of(settings)
        .token
        .is_some();
    let pushes = (github && github_token) || (gitlab && gitlab_token);
    if !pushes {
        let missing = match (github, gitlab) {
            (true, true) => "neither GITHUB_TOKEN nor GITLAB_TOKEN is set",
            (true, false) => "GITHUB_TOKEN is not set",
            _ => "GITLAB_TOKEN is not set",
        };
        return off(
            LoopState::Unarmed,
            format!("{missing}: pidevops cannot push a refreshed branch"),
        );
    }
    vec![PlannedLoop::armed(
        name,
        true,
        interval,
        "when a repository's base branch moves, brings pidevops's pull requests (GitHub) and merge requests (GitLab) on it up to date by its own git (rebase or merge, pushed with a lease) so their checks run again on what would land",
    )]
}

/// The `merge_queue` loop: armed when a repository on GitHub or GitLab has `land = "auto"` and pidevops can merge
/// on its host (`GITHUB_TOKEN`, `GITLAB_TOKEN`); its pull requests (merge requests) land one at a time per base,
/// each on top of the latest base. A host without its token is not served ([`merge_queue_hosts`]).
pub(super) fn merge_queue_plan(settings: &Settings) -> Vec<PlannedLoop> {
    let name = crate::landing::queue::MERGE_QUEUE;
    let interval = settings.projector_interval;
    let off = |state, reason: String| vec![PlannedLoop::off(name, true, state, reason, interval)];
    let (github, gitlab) = auto_landing_hosts(settings);
    if !github && !gitlab {
        return off(
            LoopState::Disabled,
            "no repository on GitHub or GitLab has land = \"auto\": people merge its pull requests"
                .into(),
        );
    }
    let hosts = merge_queue_hosts(settings);
    if !hosts.github && !hosts.gitlab {
        let missing = match (github, gitlab) {
            (true, true) => "neither GITHUB_TOKEN nor GITLAB_TOKEN is set",
            (true, false) => "GITHUB_TOKEN is not set",
            _ => "GITLAB_TOKEN is not set",
        };
        return off(
            LoopState::Unarmed,
            format!("{missing}: pidevops cannot merge a pull request"),
        );
    }
    vec![PlannedLoop::armed(
        name,
        true,
        interval,
        "with land = \"auto\" on GitHub or GitLab, merges pidevops's ready pull requests (merge requests) one at a time per base, each brought up to date with the latest base and its checks passed there first (GitHub's merge queue or GitLab's merge train where the repository runs one)",
    )]
}

/// Whether a repository on GitHub, and one on GitLab, has `land = "auto"`.
fn auto_landing_hosts(settings: &Settings) -> (bool, bool) {
    use crate::tasks::{LandMode, RepoName};
    let auto = |on: fn(&crate::config::dispatch::RepoSource) -> bool| {
        settings.file.board.land.iter().any(|(repo, rules)| {
            rules.mode == LandMode::Auto
                && repo
                    .parse::<RepoName>()
                    .is_ok_and(|repo| on(&settings.file.dispatch.source(&repo)))
        })
    };
    (
        auto(crate::config::dispatch::RepoSource::on_github),
        auto(crate::config::dispatch::RepoSource::on_gitlab),
    )
}

/// The hosts the merge queue serves: each with a repository of `land = "auto"` on it and its token set.
pub(super) fn merge_queue_hosts(settings: &Settings) -> crate::landing::queue::QueueHosts {
    let (github, gitlab) = auto_landing_hosts(settings);
    crate::landing::queue::QueueHosts {
        github: github
            && crate::providers::github::settings::GithubSettings::of(settings)
                .token
                .is_some(),
        gitlab: gitlab
            && crate::providers::gitlab::settings::GitlabSettings::of(settings)
                .token
                .is_some(),
    }
}

/// The `land` loop: armed when a repository not on GitHub has `land = "auto"` (GitHub's auto-land is
/// `effects:github`'s merge of the pull request).
pub(super) fn land_plan(settings: &Settings) -> Vec<PlannedLoop> {
    use crate::tasks::{LandMode, RepoName};
    let name = crate::landing::auto::LAND;
    let interval = settings.projector_interval;
    let auto: Vec<&String> = settings
        .file
        .board
        .land
        .iter()
        .filter(|(_, rules)| rules.mode == LandMode::Auto)
        .map(|(repo, _)| repo)
        .filter(|repo| {
            repo.parse::<RepoName>().is_ok_and(|repo| {
                let source = settings.file.dispatch.source(&repo);
                !source.on_github() && !source.on_gitlab()
            })
        })
        .collect();
    if auto.is_empty() {
        return vec![PlannedLoop::off(
            name,
            true,
            LoopState::Disabled,
            "no repository off GitHub has land = \"auto\"".into(),
            interval,
        )];
    }
    vec![PlannedLoop::armed(
        name,
        true,
        interval,
        "lands tasks of land = \"auto\" repositories not on GitHub once in review: their commit merged into the base and pushed, then done",
    )]
}

/// The dispatcher, watchdog and gc: all three run when dispatch is on; the dispatcher is `unarmed` when it is on
/// but nothing could run (no containment, a repository needing `GITHUB_TOKEN` without it, …); a profile that cannot
/// run here holds only its own tasks (`dispatch::preflight`, in the dispatcher's detail).
pub(super) fn dispatch_loops(settings: &Settings) -> Vec<PlannedLoop> {
    use crate::dispatch::dispatcher::{cannot_run, watchdog_interval, DISPATCHER, GC, WATCHDOG};
    let (config, profiles) = (&settings.file.dispatch, &settings.file.profiles);
    let gc_interval = Duration::from_secs(600);
    let mut loops = vec![
        PlannedLoop::armed(
            DISPATCHER,
            true,
            settings.projector_interval,
            "claims todo tasks by priority and age within the concurrency limits and starts their runs",
        ),
        PlannedLoop::armed(
            WATCHDOG,
            true,
            watchdog_interval(config),
            "declares runs lost when they go silent and retries their tasks; applies outcomes a crash left unapplied",
        ),
        // Every replica removes its own old worktrees.
        PlannedLoop::armed(
            GC,
            false,
            gc_interval,
            "removes worktrees of finished runs after dispatch.worktree_ttl_h",
        ),
    ];
    if let Some(off) = &config.off {
        for planned in &mut loops {
            planned.state = LoopState::Disabled;
            planned.reason = Some(off.clone());
        }
    } else if let Some(why) = cannot_run(
        config,
        profiles,
        &settings.env,
        crate::providers::github::settings::GithubSettings::of(settings)
            .token
            .is_some(),
        settings.nats_url.is_some(),
    ) {
        loops[0].state = LoopState::Unarmed;
        loops[0].reason = Some(why);
    }
    loops
}

/// How often `stale_reviews` looks: ages are hours, so a minute late is nothing.
pub(super) const STALE_REVIEWS_INTERVAL: Duration = Duration::from_secs(60);

/// The `stale_reviews` loop: armed when a repository sets `stale_after_h`.
pub(super) fn stale_plan(settings: &Settings) -> Vec<PlannedLoop> {
    let name = crate::landing::stale::STALE_REVIEWS;
    if settings.file.board.stale.is_empty() {
        return vec![PlannedLoop::off(
            name,
            true,
            LoopState::Disabled,
            "no repository sets stale_after_h".into(),
            STALE_REVIEWS_INTERVAL,
        )];
    }
    vec![PlannedLoop::armed(
        name,
        true,
        STALE_REVIEWS_INTERVAL,
        "reminds a task's source once, or closes its pull request, when it stays in review without activity past its repository's stale_after_h",
    )]
}
