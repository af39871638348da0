//! THE provider table: each chat or ticket provider pidevops hears from, registered once. The webhook routes,
//! `/health`'s and doctor's webhook lists, the secrets kept from agents, the dashboard's source lists and badges,
//! where a task came from and a pull request's "From:" line all read it; adding a provider is adding an entry
//! (and its parser in ingress, its policy in effects: AGENTS.md, "Adding a provider").

use super::Source;
use crate::tasks::{
    is_slack_id, Links, RepoName, GITHUB_ISSUE, GITHUB_PR, GITLAB_ISSUE, LINEAR_ISSUE,
    SLACK_THREAD, TELEGRAM,
};

/// One provider, whole.
#[derive(Debug)]
pub struct ProviderEntry {
    /// `github`: the event source's name, the actor its tasks are created by, the dashboard's filter value.
    pub name: &'static str,
    pub source: Source,
    /// The dashboard's badge.
    pub label: &'static str,
    /// `POST /webhooks/<name>`.
    pub webhook_route: &'static str,
    /// The variable holding the secret its deliveries are verified with (`Settings::webhook_secret` reads it).
    pub webhook_secret: &'static str,
    /// Its variables no agent profile or repository hook may be handed (its API token, its webhook secret).
    pub agent_secrets: &'static [&'static str],
    /// Its own environment variables besides the webhook secret (its credential, its API's address, who may
    /// command): config reads and checks them, `serve --help` and `config check` list them, and its folder's
    /// `settings.rs` makes its typed settings of them.
    pub variables: &'static [ProviderVariable],
    /// When a task's links name several providers and its creator names none, the lowest rank is where it came
    /// from (a Linear issue over a GitHub issue over a Telegram message).
    pub origin_rank: u8,
    /// Whether a task's links say it came from here.
    pub came_from: fn(&Links) -> bool,
    /// The pull request body's "From:" part for a task (or plan) of `repo` with these links.
    pub from_line: fn(&Links, &RepoName) -> Option<String>,
    /// The ticket a board card names as where the task came from (the first provider in the table with one).
    pub card_link: fn(&Links) -> Option<LinkLine>,
    /// The task page's lines for this provider's links (listed by `origin_rank`).
    pub page_links: fn(&Links) -> Vec<LinkLine>,
}

/// One of a provider's environment variables.
#[derive(Debug)]
pub struct ProviderVariable {
    pub name: &'static str,
    /// What `serve --help` says of it.
    pub help: &'static str,
    pub kind: VariableKind,
    /// Refuses a value the provider could not use, saying why (never echoing the value of a secret); config
    /// runs it when it reads the variable, so a bad value stops the start.
    pub check: Option<VariableCheck>,
}

/// A provider variable's check: `Err` says why a value is refused.
pub type VariableCheck = fn(&str) -> Result<(), String>;

/// How config keeps a provider's variable and how `config check` prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VariableKind {
    /// A credential: kept wrapped, printed as set or unset, masked wherever it would appear.
    Secret,
    /// An API's base address (a trailing `/` dropped), `default` when unset; printed with any password redacted.
    Url { default: &'static str },
    /// Plain text (a list of ids, say); printed as it is, or unset.
    Text,
}

/// Whole numbers separated by commas (`TELEGRAM_ALLOWED_CHATS`), or which one is not; `what` names an item.
pub fn id_list(list: &str, what: &str) -> Result<std::collections::BTreeSet<i64>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(|id| {
            id.parse::<i64>()
                .map_err(|_| format!("{id:?} is not a {what} id (a whole number)"))
        })
        .collect()
}

/// Slack ids separated by commas (`SLACK_ALLOWED_USERS`: `U024BE7LH, U0G9QF9C6`), or which one is not; `what`
/// names an item.
pub fn slack_id_list(list: &str, what: &str) -> Result<std::collections::BTreeSet<String>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(|id| {
            if is_slack_id(id) {
                Ok(id.to_owned())
            } else {
                Err(format!(
                    "{id:?} is not a Slack {what} id (upper-case letters and digits, as U024BE7LH)"
                ))
            }
        })
        .collect()
}

/// A Slack token of kind `prefix` (`xoxb-`: a bot token; `xapp-`: an app-level token), or what it should be
/// (never echoing it).
pub fn slack_token(token: &str, prefix: &str, what: &str) -> Result<(), String> {
    if token.starts_with(prefix) && token.len() > prefix.len() {
        Ok(())
    } else {
        Err(format!("expected {what} ({prefix}…)"))
    }
}

/// A Telegram bot's numeric id: the part of its token before `:` (never the secret after it).
pub fn telegram_bot_id(token: &str) -> Result<&str, String> {
    let id = token.split(':').next().unwrap_or_default();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return Err("expected <bot id>:<secret> as issued by @BotFather".into());
    }
    Ok(id)
}

/// A link as the dashboard shows it: `label text`, the text linked to `url` where the address is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkLine {
    /// `Issue`; empty on a board card.
    pub label: &'static str,
    pub text: String,
    pub url: Option<String>,
}

/// A GitHub issue's or pull request's page (`kind`: `issues` or `pull`).
fn github_url(reference: &crate::tasks::GithubRef, kind: &str) -> String {
    format!(
        "https://github.com/{}/{kind}/{}",
        reference.repo, reference.number
    )
}

/// Every provider, in the order lists show them.
pub const PROVIDERS: [ProviderEntry; 5] = [
    ProviderEntry {
        name: "github",
        source: Source::Github,
        label: "⬤ GitHub",
        webhook_route: "/webhooks/github",
        webhook_secret: "GITHUB_WEBHOOK_SECRET",
        agent_secrets: &[
            "GITHUB_TOKEN",
            "GITHUB_WEBHOOK_SECRET",
            "GITHUB_APP_PRIVATE_KEY",
        ],
        variables: &[
            ProviderVariable {
                name: "GITHUB_TOKEN",
                help: "clone and push, pull requests and comments",
                kind: VariableKind::Secret,
                check: None,
            },
            ProviderVariable {
                name: "GITHUB_API_URL",
                help: "GitHub's API (default https://api.github.com)",
                kind: VariableKind::Url {
                    default: "https://api.github.com",
                },
                check: None,
            },
        ],
        origin_rank: 1,
        came_from: |links| links.has(GITHUB_ISSUE),
        from_line: |links, repo| {
            // `Closes` only works within the repository; elsewhere it is a plain reference.
            links.get(GITHUB_ISSUE).map(|issue| {
                if &issue.repo == repo {
                    format!("Closes #{}", issue.number)
                } else {
                    format!("{issue}")
                }
            })
        },
        card_link: |links| {
            links.get(GITHUB_ISSUE).map(|issue| LinkLine {
                label: "",
                text: issue.to_string(),
                url: Some(github_url(&issue, "issues")),
            })
        },
        page_links: |links| {
            let issue = links.get(GITHUB_ISSUE).map(|issue| LinkLine {
                label: "Issue",
                text: issue.to_string(),
                url: Some(github_url(&issue, "issues")),
            });
            let pr = links.get(GITHUB_PR).map(|pr| LinkLine {
                label: "Pull request",
                text: pr.to_string(),
                url: Some(github_url(&pr, "pull")),
            });
            issue.into_iter().chain(pr).collect()
        },
    },
    ProviderEntry {
        name: "linear",
        source: Source::Linear,
        label: "◆ Linear",
        webhook_route: "/webhooks/linear",
        webhook_secret: "LINEAR_WEBHOOK_SECRET",
        agent_secrets: &["LINEAR_API_KEY", "LINEAR_WEBHOOK_SECRET"],
        variables: &[
            ProviderVariable {
                name: "LINEAR_API_KEY",
                help: "Linear's API: comments, states, the poller",
                kind: VariableKind::Secret,
                check: None,
            },
            ProviderVariable {
                name: "LINEAR_API_URL",
                help: "Linear's GraphQL endpoint",
                kind: VariableKind::Url {
                    default: "https://api.linear.app/graphql",
                },
                check: None,
            },
        ],
        origin_rank: 0,
        came_from: |links| links.has(LINEAR_ISSUE),
        from_line: |links, _| {
            links
                .get(LINEAR_ISSUE)
                .map(|issue| format!("Linear {}", issue.identifier()))
        },
        card_link: |links| {
            links.get(LINEAR_ISSUE).map(|issue| LinkLine {
                label: "",
                text: issue.identifier().to_owned(),
                url: None,
            })
        },
        page_links: |links| {
            let issue = links.get(LINEAR_ISSUE).map(|issue| LinkLine {
                label: "Linear",
                text: issue.identifier().to_owned(),
                url: None,
            });
            issue.into_iter().collect()
        },
    },
    ProviderEntry {
        name: "telegram",
        source: Source::Telegram,
        label: "✈ Telegram",
        webhook_route: "/webhooks/telegram",
        webhook_secret: "TELEGRAM_WEBHOOK_SECRET",
        agent_secrets: &["TELEGRAM_BOT_TOKEN", "TELEGRAM_WEBHOOK_SECRET"],
        variables: &[
            ProviderVariable {
                name: "TELEGRAM_BOT_TOKEN",
                help: "the bot pidevops speaks as",
                kind: VariableKind::Secret,
                check: Some(|token| telegram_bot_id(token).map(|_| ())),
            },
            ProviderVariable {
                name: "TELEGRAM_API_URL",
                help: "the Bot API (default https://api.telegram.org)",
                kind: VariableKind::Url {
                    default: "https://api.telegram.org",
                },
                check: None,
            },
            ProviderVariable {
                name: "TELEGRAM_ALLOWED_CHATS",
                help: "chat ids whose /new makes tasks (comma-separated)",
                kind: VariableKind::Text,
                check: Some(|list| id_list(list, "chat").map(|_| ())),
            },
            ProviderVariable {
                name: "TELEGRAM_ALLOWED_USERS",
                help: "user ids who may command (comma-separated)",
                kind: VariableKind::Text,
                check: Some(|list| id_list(list, "user").map(|_| ())),
            },
        ],
        origin_rank: 2,
        came_from: |links| links.has(TELEGRAM),
        from_line: |links, _| {
            links
                .get(TELEGRAM)
                .map(|message| format!("Telegram message {message}"))
        },
        card_link: |links| {
            links.get(TELEGRAM).map(|message| LinkLine {
                label: "",
                text: format!("Telegram {message}"),
                url: None,
            })
        },
        page_links: |links| {
            let message = links.get(TELEGRAM).map(|message| LinkLine {
                label: "Telegram message",
                text: message.to_string(),
                url: None,
            });
            message.into_iter().collect()
        },
    },
    ProviderEntry {
        name: "slack",
        source: Source::Slack,
        label: "# Slack",
        webhook_route: "/webhooks/slack",
        // Slack calls it the signing secret: every request it sends is signed with it.
        webhook_secret: "SLACK_SIGNING_SECRET",
        agent_secrets: &[
            "SLACK_BOT_TOKEN",
            "SLACK_APP_TOKEN",
            "SLACK_SIGNING_SECRET",
        ],
        variables: &[
            ProviderVariable {
                name: "SLACK_BOT_TOKEN",
                help: "the bot pidevops posts as (xoxb-…)",
                kind: VariableKind::Secret,
                check: Some(|token| slack_token(token, "xoxb-", "a bot token")),
            },
            ProviderVariable {
                name: "SLACK_APP_TOKEN",
                help: "Socket Mode's app-level token (xapp-…): events over a websocket, no public URL",
                kind: VariableKind::Secret,
                check: Some(|token| slack_token(token, "xapp-", "an app-level token")),
            },
            ProviderVariable {
                name: "SLACK_API_URL",
                help: "Slack's Web API (default https://slack.com/api)",
                kind: VariableKind::Url {
                    default: "https://slack.com/api",
                },
                check: None,
            },
            ProviderVariable {
                name: "SLACK_ALLOWED_USERS",
                help: "Slack user ids who may command (comma-separated); unset: no one",
                kind: VariableKind::Text,
                check: Some(|list| slack_id_list(list, "user").map(|_| ())),
            },
            ProviderVariable {
                name: "SLACK_ALLOWED_CHANNELS",
                help: "channel ids where a mention makes a task (comma-separated; [slack.channels] adds)",
                kind: VariableKind::Text,
                check: Some(|list| slack_id_list(list, "channel").map(|_| ())),
            },
        ],
        origin_rank: 3,
        came_from: |links| links.has(SLACK_THREAD),
        from_line: |links, _| {
            links
                .get(SLACK_THREAD)
                .map(|thread| format!("Slack {thread}"))
        },
        card_link: |links| {
            links.get(SLACK_THREAD).map(|thread| LinkLine {
                label: "",
                text: format!("Slack {}", thread.channel()),
                url: None,
            })
        },
        page_links: |links| {
            let thread = links.get(SLACK_THREAD).map(|thread| LinkLine {
                label: "Slack",
                text: thread.to_string(),
                url: None,
            });
            thread.into_iter().collect()
        },
    },
    ProviderEntry {
        name: "gitlab",
        source: Source::Gitlab,
        label: "◣ GitLab",
        webhook_route: "/webhooks/gitlab",
        // GitLab calls it the secret token: sent as it is in `X-Gitlab-Token`, not a signature.
        webhook_secret: "GITLAB_WEBHOOK_SECRET",
        agent_secrets: &["GITLAB_TOKEN", "GITLAB_WEBHOOK_SECRET"],
        variables: &[
            ProviderVariable {
                name: "GITLAB_TOKEN",
                help: "GitLab's REST API: notes on the tasks' issues",
                kind: VariableKind::Secret,
                check: None,
            },
            ProviderVariable {
                name: "GITLAB_URL",
                help: "the GitLab instance (default https://gitlab.com; a self-managed one's address)",
                kind: VariableKind::Url {
                    default: "https://gitlab.com",
                },
                check: None,
            },
        ],
        origin_rank: 4,
        came_from: |links| links.has(GITLAB_ISSUE),
        // A plain reference: `Closes` would be GitLab's word, and the pull request is GitHub's.
        from_line: |links, _| {
            links
                .get(GITLAB_ISSUE)
                .map(|issue| format!("GitLab {issue}"))
        },
        // No address: the instance is GITLAB_URL, which the table does not read.
        card_link: |links| {
            links.get(GITLAB_ISSUE).map(|issue| LinkLine {
                label: "",
                text: format!("GitLab {issue}"),
                url: None,
            })
        },
        page_links: |links| {
            let issue = links.get(GITLAB_ISSUE).map(|issue| LinkLine {
                label: "GitLab issue",
                text: issue.to_string(),
                url: None,
            });
            issue.into_iter().collect()
        },
    },
];

/// The provider named `name` (an event source, an actor, a filter value).
pub fn provider(name: &str) -> Option<&'static ProviderEntry> {
    PROVIDERS.iter().find(|p| p.name == name)
}

/// The provider an event source is, if it is one (`pidevops` is not).
pub fn of_source(source: Source) -> Option<&'static ProviderEntry> {
    PROVIDERS.iter().find(|p| p.source == source)
}

/// Every provider's name, in the table's order.
pub fn names() -> impl Iterator<Item = &'static str> {
    PROVIDERS.iter().map(|p| p.name)
}

/// Where a task came from by its links alone: the provider of lowest `origin_rank` its links name.
pub fn origin(links: &Links) -> Option<&'static ProviderEntry> {
    PROVIDERS
        .iter()
        .filter(|p| (p.came_from)(links))
        .min_by_key(|p| p.origin_rank)
}

/// A pull request body's "From:" parts, in the table's order.
pub fn from_lines(links: &Links, repo: &RepoName) -> Vec<String> {
    PROVIDERS
        .iter()
        .filter_map(|p| (p.from_line)(links, repo))
        .collect()
}

/// The ticket a board card names: the first provider in the table with one.
pub fn card_link(links: &Links) -> Option<LinkLine> {
    PROVIDERS.iter().find_map(|p| (p.card_link)(links))
}

/// The task page's link lines, the providers by `origin_rank` (where a task usually comes from first).
pub fn page_links(links: &Links) -> Vec<LinkLine> {
    let mut providers: Vec<_> = PROVIDERS.iter().collect();
    providers.sort_by_key(|p| p.origin_rank);
    providers
        .into_iter()
        .flat_map(|p| (p.page_links)(links))
        .collect()
}

/// The provider variable named `name`, with its provider.
pub fn variable(name: &str) -> Option<(&'static ProviderEntry, &'static ProviderVariable)> {
    PROVIDERS
        .iter()
        .find_map(|p| p.variables.iter().find(|v| v.name == name).map(|v| (p, v)))
}

/// Every provider's variables kept from agents.
pub fn agent_secrets() -> impl Iterator<Item = &'static str> {
    PROVIDERS
        .iter()
        .flat_map(|p| p.agent_secrets.iter().copied())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn each_entry_is_whole_and_agrees_with_its_source() {
        let mut names = BTreeSet::new();
        let mut ranks = BTreeSet::new();
        for p in &PROVIDERS {
            assert!(names.insert(p.name), "{} twice", p.name);
            assert!(ranks.insert(p.origin_rank), "{}'s rank is taken", p.name);
            assert_eq!(p.source.as_str(), p.name);
            assert_eq!(p.webhook_route, format!("/webhooks/{}", p.name));
            // `<NAME>_WEBHOOK_SECRET`, or the name the provider's own console gives it (Slack's signing secret).
            let prefix = format!("{}_", p.name.to_uppercase());
            assert!(
                p.webhook_secret.starts_with(&prefix) && p.webhook_secret.ends_with("_SECRET"),
                "{}",
                p.webhook_secret
            );
            assert!(p.agent_secrets.contains(&p.webhook_secret), "{}", p.name);
            assert!(!p.label.is_empty());
            assert_eq!(provider(p.name).map(|e| e.source), Some(p.source));
            assert_eq!(of_source(p.source).map(|e| e.name), Some(p.name));
        }
        // Every source but pidevops's own is a provider.
        let sources: BTreeSet<_> = Source::ALL
            .into_iter()
            .filter(|s| *s != Source::Pidevops)
            .collect();
        assert_eq!(sources, PROVIDERS.iter().map(|p| p.source).collect());
        assert!(of_source(Source::Pidevops).is_none());
    }

    #[test]
    fn origin_prefers_linear_then_github_then_telegram() {
        let repo: RepoName = "o/n".parse().unwrap();
        let links = Links::default();
        assert!(origin(&links).is_none());
        let links = links.with(TELEGRAM, &crate::tasks::TelegramMessage::new(5, 7).unwrap());
        assert_eq!(origin(&links).map(|p| p.name), Some("telegram"));
        let links = links.with(
            GITHUB_ISSUE,
            &crate::tasks::GithubRef::new(repo.clone(), 3).unwrap(),
        );
        assert_eq!(origin(&links).map(|p| p.name), Some("github"));
        let links = links.with(
            LINEAR_ISSUE,
            &crate::tasks::LinearIssue::new(uuid::Uuid::nil(), "ENG-1").unwrap(),
        );
        assert_eq!(origin(&links).map(|p| p.name), Some("linear"));
        assert_eq!(
            from_lines(&links, &repo),
            [
                "Closes #3",
                "Linear ENG-1",
                "Telegram message chat 5 message 7"
            ]
        );
        let other: RepoName = "o/other".parse().unwrap();
        assert_eq!(from_lines(&links, &other)[0], "o/n#3");
    }

    #[test]
    fn the_dashboard_shows_each_link_and_names_the_first_providers_ticket() {
        use crate::tasks::{GithubRef, LinearIssue, TelegramMessage};
        let repo: RepoName = "o/n".parse().unwrap();
        let telegram = Links::default().with(TELEGRAM, &TelegramMessage::new(-100, 7).unwrap());
        let linear = telegram.clone().with(
            LINEAR_ISSUE,
            &LinearIssue::new(uuid::Uuid::from_u128(5), "ENG-4").unwrap(),
        );
        let all = linear
            .clone()
            .with(GITHUB_ISSUE, &GithubRef::new(repo.clone(), 3).unwrap())
            .with(GITHUB_PR, &GithubRef::new(repo, 9).unwrap());
        let line = |label, text: &str, url: Option<&str>| LinkLine {
            label,
            text: text.to_owned(),
            url: url.map(str::to_owned),
        };
        assert_eq!(
            page_links(&all),
            [
                line("Linear", "ENG-4", None),
                line("Issue", "o/n#3", Some("https://github.com/o/n/issues/3")),
                line(
                    "Pull request",
                    "o/n#9",
                    Some("https://github.com/o/n/pull/9")
                ),
                line("Telegram message", "chat -100 message 7", None),
            ]
        );
        // A card names one ticket: a GitHub issue over a Linear issue over a Telegram message.
        assert_eq!(
            card_link(&all),
            Some(line("", "o/n#3", Some("https://github.com/o/n/issues/3")))
        );
        assert_eq!(card_link(&linear), Some(line("", "ENG-4", None)));
        assert_eq!(
            card_link(&telegram),
            Some(line("", "Telegram chat -100 message 7", None))
        );
        assert_eq!(card_link(&Links::default()), None);
        assert!(page_links(&Links::default()).is_empty());
    }
}
