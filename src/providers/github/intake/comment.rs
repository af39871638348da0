//! GitHub comments addressed to pidevops, pure: whether a comment on an issue or a pull request is one (its author
//! trusted, not pidevops's own account, the repository allowed, the body mentioning `@<bot_login>` or starting with
//! `/pidevops`), and what it asks: free text (a follow-up, or the answer to a task's question) or a command
//! (`/pidevops retry | cancel | approve | status`). Which task it is for is decided by intake from the issue or pull
//! request it is on, never from what the comment says; the comment it hands intake is intake's type
//! (`intake::rules::comment`).

use octocrab::models::issues::Issue;
use octocrab::models::webhook_events::payload::IssueCommentWebhookEventPayload;
use octocrab::models::IssueState;
use serde::Deserialize;
use serde_json::Value;

use super::issue::{association_name, github_issue_draft, trusted};
use crate::board::Draft;
use crate::domain::Source;
use crate::intake::rules::comment::{ask, CodeHost, Comment, ReviewRequest, PREFIX};
use crate::intake::rules::{ignore, Decision, IntakeConfig};
use crate::projectors::tasks::LinkKind;
use crate::tasks::{RepoName, GITHUB_PR};

/// GitHub as intake's comments know it: what a comment does is done as `github`, said to be `on GitHub`, recorded
/// as `conversation.github_comment` in `github-comment:<repo>:<id>`, and a comment on a pull request finds the task
/// whose `github_pr` it is. Stored names: they never change.
pub static HOST: CodeHost = CodeHost {
    source: Source::Github,
    name: "GitHub",
    record: "conversation.github_comment",
    stream_prefix: "github-comment:",
    pull_request: |links| {
        links.get(GITHUB_PR).map(|pr| ReviewRequest {
            shown: pr.to_string(),
            repo: pr.repo,
            number: pr.number.get(),
        })
    },
    pull_request_kind: LinkKind::GithubPr,
};

/// `github.issue_comment.created`: a comment for pidevops, or why not (recorded, never answered: a stranger must
/// not be able to make pidevops noisy).
pub fn created(data: &Value, config: &super::Config<'_>) -> Decision {
    match addressed(data, config) {
        Ok(comment) => Decision::Comment(Box::new(comment)),
        Err(reason) => ignore(reason),
    }
}

/// `github.issue_comment.edited`: never run again. Intake says whether it ran when it was created.
pub fn edited(data: &Value) -> Decision {
    let repo = data["repository"]["full_name"]
        .as_str()
        .and_then(|r| r.parse::<RepoName>().ok());
    match (repo, data["comment"]["id"].as_u64()) {
        (Some(repo), Some(id)) => Decision::CommentEdited {
            stream: HOST.comment_stream(&repo, id),
            id,
        },
        _ => ignore("an edited comment without a repository or an id"),
    }
}

/// The comment, if it passes every gate; otherwise the reason it does not. The comment and its issue are read
/// through octocrab's model of the event (the repository, which octocrab keeps beside it, by name).
fn addressed(data: &Value, config: &super::Config<'_>) -> Result<Comment, String> {
    let event = IssueCommentWebhookEventPayload::deserialize(data).map_err(|e| {
        format!("a comment that does not read as GitHub's issue_comment event: {e}")
    })?;
    let comment = &event.comment;
    let id = comment.id.0;
    let number = event.issue.number;
    let login = comment.user.login.as_str();
    let bot = config.own.bot_login.as_deref();
    if bot.is_some_and(|bot| bot.eq_ignore_ascii_case(login)) {
        return Err(format!(
            "comment {id} is by pidevops's own account {login}; it never answers itself"
        ));
    }
    let body = comment.body.as_deref().unwrap_or_default();
    let Some(ask) = ask(body, bot) else {
        return Err(format!(
            "comment {id} is not addressed to pidevops (no {} and no {PREFIX} command)",
            bot.map_or_else(
                || "bot_login configured".to_owned(),
                |b| format!("@{b} mention")
            )
        ));
    };
    let repo: RepoName = data["repository"]["full_name"]
        .as_str()
        .unwrap_or_default()
        .parse()
        .map_err(|e| format!("comment {id}: the repository is not valid: {e}"))?;
    if let Err(refused) = config.allowed_repos.check(&repo) {
        return Err(format!("comment {id} on {repo}#{number}: {refused}"));
    }
    // GitHub's own spelling (`MEMBER`), as the configuration lists it.
    let association = association_name(comment.author_association.as_ref());
    if !config.own.associations.contains(&association) {
        return Err(format!(
            "comment {id} on {repo}#{number}: {login} is {association} on the repository; pidevops takes \
             comments only from {}",
            trusted(config)
        ));
    }
    let pull_request = event.issue.pull_request.is_some();
    let draft = (!pull_request).then(|| issue_draft(&repo, &event.issue, config));
    Ok(Comment {
        host: &HOST,
        repo,
        number,
        pull_request,
        id,
        login: login.to_owned(),
        ask,
        draft,
    })
}

/// The task an issue with no task yet becomes when a trusted comment asks (as a label would make it).
fn issue_draft(
    repo: &RepoName,
    issue: &Issue,
    config: &IntakeConfig,
) -> Result<(String, Box<Draft>), String> {
    if issue.state == IssueState::Closed {
        return Err("the issue is closed".to_owned());
    }
    github_issue_draft(repo.as_str(), issue, config).map(|(key, draft)| (key, Box::new(draft)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intake::rules::comment::{Ask, CommentCommand};
    use crate::tasks::GITHUB_ISSUE;
    use serde_json::json;

    const BOT: Option<&str> = Some("pidevops-bot");

    fn text(s: &str) -> Option<Ask> {
        Some(Ask::Text(s.to_owned()))
    }

    fn cmd(command: CommentCommand, reason: Option<&str>) -> Option<Ask> {
        Some(Ask::Command {
            command,
            reason: reason.map(str::to_owned),
        })
    }

    #[test]
    fn a_mention_as_a_whole_word_in_any_case_addresses_pidevops() {
        assert_eq!(
            ask("@pidevops-bot use 5 retries", BOT),
            text("use 5 retries")
        );
        assert_eq!(
            ask("@PiDevOps-Bot: use 5 retries", BOT),
            text("use 5 retries")
        );
        assert_eq!(ask("@pidevops-bot, please", BOT), text("please"));
        assert_eq!(
            ask("Thanks. (@pidevops-bot) also log it.", BOT),
            text("Thanks. () also log it.")
        );
        assert_eq!(
            ask("first line\n\n@pidevops-bot second", BOT),
            text("first line\n\n second")
        );
        assert_eq!(ask("ping @pidevops-bot.", BOT), text("ping ."));
    }

    #[test]
    fn a_longer_login_an_address_or_a_team_is_not_a_mention() {
        for body in [
            "@pidevops-bot2 do it",
            "@pidevops-bot-old do it",
            "mail me at x@pidevops-bot",
            "@pidevops-bot/team do it",
            "@pidevops_bot do it",
            "pidevops-bot do it",
            "@pidevops do it",
            "",
        ] {
            assert_eq!(ask(body, BOT), None, "{body:?}");
        }
        assert_eq!(
            ask("@pidevops-bot2 and @pidevops-bot both", BOT),
            text("@pidevops-bot2 and  both")
        );
    }

    #[test]
    fn without_a_bot_login_only_the_prefix_addresses_pidevops() {
        assert_eq!(ask("@pidevops-bot use 5 retries", None), None);
        assert_eq!(
            ask("/pidevops status", None),
            cmd(CommentCommand::Status, None)
        );
    }

    #[test]
    fn commands_are_read_from_the_start_after_any_mention() {
        assert_eq!(
            ask("/pidevops retry", BOT),
            cmd(CommentCommand::Retry, None)
        );
        assert_eq!(
            ask("  /PIDEVOPS Cancel  ", BOT),
            cmd(CommentCommand::Cancel, None)
        );
        assert_eq!(
            ask("/pidevops cancel wrong issue\nmore words", BOT),
            cmd(CommentCommand::Cancel, Some("wrong issue"))
        );
        assert_eq!(
            ask("/pidevops approve", BOT),
            cmd(CommentCommand::Approve, None)
        );
        assert_eq!(
            ask("@pidevops-bot /pidevops status", BOT),
            cmd(CommentCommand::Status, None)
        );
        assert_eq!(
            ask("/pidevops\tstatus", BOT),
            cmd(CommentCommand::Status, None)
        );
    }

    #[test]
    fn an_unknown_or_missing_command_is_an_error_not_text() {
        assert_eq!(
            ask("/pidevops merge", BOT),
            Some(Ask::Unknown("merge".into()))
        );
        assert_eq!(ask("/pidevops", BOT), Some(Ask::Unknown(String::new())));
        assert_eq!(
            ask("/pidevops\nretry", BOT),
            Some(Ask::Unknown(String::new()))
        );
        assert_eq!(ask("@pidevops-bot", BOT), Some(Ask::Unknown(String::new())));
        assert_eq!(
            ask(" @pidevops-bot: ", BOT),
            Some(Ask::Unknown(String::new()))
        );
        assert_eq!(CommentCommand::listed(), "retry, cancel, approve, status");
    }

    #[test]
    fn the_prefix_elsewhere_or_glued_is_not_a_command() {
        assert_eq!(ask("/pidevopsx retry", None), None);
        assert_eq!(ask("please /pidevops retry", None), None);
        assert_eq!(ask("`/pidevops retry`", None), None);
        // Mentioned, the words are a follow-up, the prefix inside them included.
        assert_eq!(
            ask("@pidevops-bot please /pidevops retry", BOT),
            text("please /pidevops retry")
        );
    }

    fn config() -> super::super::Config<'static> {
        let file: crate::config::FileConfig = r#"
            [intake]
            allow_repos = ["acme/*"]
            [intake.github]
            bot_login = "pidevops-bot"
            "#
        .parse()
        .unwrap();
        let own = crate::providers::github::settings::GithubIntake::from_tables(file.tables());
        super::super::Config {
            shared: Box::leak(Box::new(file.intake)),
            own: Box::leak(Box::new(own)),
        }
    }

    /// GitHub's own `issue_comment.created` (a fixture), made a comment by `login` with `association` on
    /// acme/api#12.
    fn payload(body: &str, association: &str, login: &str) -> Value {
        let mut payload: Value = serde_json::from_str(include_str!(
            "../../../../tests/fixtures/github/issue_comment/created.payload.json"
        ))
        .unwrap();
        payload["repository"]["full_name"] = json!("acme/api");
        let issue = &mut payload["issue"];
        issue["number"] = json!(12);
        issue["title"] = json!("Fix the login redirect");
        issue["body"] = json!("The redirect drops the query.\n\nDone when: it keeps it");
        issue["state"] = json!("open");
        issue["labels"] = json!([]);
        issue["author_association"] = json!("NONE");
        issue["user"]["login"] = json!("someone");
        issue["updated_at"] = json!("2026-11-29T10:15:03Z");
        issue["pull_request"] = Value::Null;
        let comment = &mut payload["comment"];
        comment["id"] = json!(991);
        comment["body"] = json!(body);
        comment["author_association"] = json!(association);
        comment["user"]["login"] = json!(login);
        payload["sender"]["login"] = json!(login);
        payload
    }

    fn comment(decision: Decision) -> Comment {
        match decision {
            Decision::Comment(c) => *c,
            other => panic!("not a comment: {other:?}"),
        }
    }

    fn reason(decision: Decision) -> String {
        match decision {
            Decision::Ignore { reason } => reason,
            other => panic!("not ignored: {other:?}"),
        }
    }

    #[test]
    fn a_trusted_comment_on_an_issue_carries_the_issues_draft() {
        let c = comment(created(
            &payload("@pidevops-bot go", "MEMBER", "ada"),
            &config(),
        ));
        assert_eq!(c.repo.as_str(), "acme/api");
        assert_eq!((c.number, c.id, c.pull_request), (12, 991, false));
        assert_eq!(c.ask, Ask::Text("go".into()));
        assert_eq!(c.host, &HOST);
        assert_eq!(c.origin_key(), "github:comment:991");
        assert_eq!(c.stream(), "github-comment:acme/api:991");
        assert_eq!(c.from(), "ada on acme/api#12");
        let (key, draft) = c.draft.clone().unwrap().unwrap();
        assert_eq!(key, "github:acme/api#12");
        assert_eq!(key, c.issue_key());
        assert_eq!(draft.spec.task(), "Fix the login redirect");
        assert_eq!(draft.spec.done_when(), "it keeps it");
        assert_eq!(draft.spec.scope(), "The redirect drops the query.");
        assert!(draft.links.has(GITHUB_ISSUE));
    }

    #[test]
    fn a_comment_on_a_pull_request_makes_no_draft_and_a_closed_issue_says_why() {
        let mut on_pr = payload("@pidevops-bot go", "OWNER", "ada");
        on_pr["issue"]["pull_request"] = json!({
            "url": "https://api.github.com/repos/acme/api/pulls/12",
            "html_url": "https://github.com/acme/api/pull/12",
            "diff_url": "https://github.com/acme/api/pull/12.diff",
            "patch_url": "https://github.com/acme/api/pull/12.patch"
        });
        let c = comment(created(&on_pr, &config()));
        assert!(c.pull_request);
        assert_eq!(c.draft, None);
        let mut closed = payload("@pidevops-bot go", "OWNER", "ada");
        closed["issue"]["state"] = json!("closed");
        let c = comment(created(&closed, &config()));
        assert_eq!(c.draft, Some(Err("the issue is closed".to_owned())));
    }

    #[test]
    fn strangers_our_own_account_other_repositories_and_plain_comments_are_ignored_saying_why() {
        let config = config();
        let stranger = reason(created(
            &payload("/pidevops cancel", "NONE", "mallory"),
            &config,
        ));
        assert!(stranger.contains("mallory is NONE"), "{stranger}");
        let contributor = reason(created(
            &payload("/pidevops cancel", "CONTRIBUTOR", "eve"),
            &config,
        ));
        assert!(contributor.contains("eve is CONTRIBUTOR"), "{contributor}");
        let own = reason(created(
            &payload("@pidevops-bot done", "OWNER", "PiDevOps-Bot"),
            &config,
        ));
        assert!(own.contains("own account"), "{own}");
        let plain = reason(created(&payload("LGTM", "OWNER", "ada"), &config));
        assert!(plain.contains("not addressed to pidevops"), "{plain}");
        let mut elsewhere = payload("/pidevops cancel", "OWNER", "ada");
        elsewhere["repository"]["full_name"] = json!("other-org/api");
        let other = reason(created(&elsewhere, &config));
        assert!(other.contains("other-org/api"), "{other}");
        let mut no_id = payload("/pidevops cancel", "OWNER", "ada");
        no_id["comment"]["id"] = Value::Null;
        let no_id = reason(created(&no_id, &config));
        assert!(
            no_id.contains("does not read as GitHub's issue_comment event"),
            "{no_id}"
        );
    }

    #[test]
    fn an_edit_names_the_comments_stream() {
        let edit = edited(&payload("@pidevops-bot go", "OWNER", "ada"));
        assert_eq!(
            edit,
            Decision::CommentEdited {
                stream: "github-comment:acme/api:991".to_owned(),
                id: 991
            }
        );
        assert!(matches!(edited(&json!({})), Decision::Ignore { .. }));
        assert_eq!(
            HOST.comment_stream(&"Acme/API".parse().unwrap(), 7),
            "github-comment:acme/api:7"
        );
        // Stored: the record's type and the actor of what a comment does.
        assert_eq!(HOST.record, "conversation.github_comment");
        assert_eq!(HOST.source.as_str(), "github");
        assert_eq!(HOST.pull_request_kind.as_str(), "github_pr");
    }
}
