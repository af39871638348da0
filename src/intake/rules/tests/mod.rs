use std::collections::BTreeSet;

use super::*;
use crate::providers::github::intake::{
    github_withdrawal, issue as github_issue, issue::github_issue,
};
use crate::providers::github::settings::{GithubIntake, GithubSettings};
use crate::providers::linear::intake::{agent_session_created, done_when, linear_scope};
use crate::providers::linear::settings::{LinearIntake, LinearSettings};
use crate::providers::telegram::intake::{read_update, telegram_message, telegram_refusal};
use crate::providers::telegram::settings::TelegramSettings;
use crate::tasks::GITHUB_ISSUE;

/// `decide` as intake calls it, with every provider's rules as start-up builds them.
fn decide(event: &StoredEvent, config: &Rig) -> Decision {
    super::decide(event, &config.shared, &config.rules())
}

/// Intake's shared settings and each provider's own, as start-up makes them of a `pidevops.toml` (and
/// `TELEGRAM_ALLOWED_CHATS=-100,7`).
#[derive(Clone, Debug)]
pub(super) struct Rig {
    shared: IntakeConfig,
    github: GithubIntake,
    linear: LinearIntake,
    telegram: TelegramSettings,
    settings: crate::config::Settings,
}

impl Rig {
    fn github(&self) -> crate::providers::github::intake::Config<'_> {
        RuleConfig {
            shared: &self.shared,
            own: &self.github,
        }
    }

    fn linear(&self) -> crate::providers::linear::intake::Config<'_> {
        RuleConfig {
            shared: &self.shared,
            own: &self.linear,
        }
    }

    fn telegram(&self) -> crate::providers::telegram::intake::Config<'_> {
        RuleConfig {
            shared: &self.shared,
            own: &self.telegram,
        }
    }

    /// Every provider's rules with these settings (`providers::intake_rules`, from the same settings).
    fn rules(&self) -> Vec<Box<dyn SourceRules>> {
        crate::providers::intake_rules(&self.settings)
    }
}

impl Default for Rig {
    fn default() -> Self {
        config("").unwrap()
    }
}

fn config(text: &str) -> Result<Rig, String> {
    let mut settings =
        crate::config::Settings::for_tests(crate::config::DatabaseUrl::Sqlite(":memory:".into()));
    settings.file = text
        .parse::<crate::config::FileConfig>()
        .map_err(|e| e.to_string())?;
    settings
        .providers
        .set("TELEGRAM_ALLOWED_CHATS", Some("-100, 7"))
        .map_err(|e| e.to_string())?;
    Ok(Rig {
        shared: settings.file.intake.clone(),
        github: GithubSettings::of(&settings).intake,
        linear: LinearSettings::of(&settings).intake,
        telegram: TelegramSettings::of(&settings),
        settings,
    })
}

/// A message as the Bot API sends one: `id` in `chat` (a group when negative), from `user` (@ada), saying `text`.
fn telegram_message_json(id: i64, chat: i64, user: i64, text: &str) -> Value {
    serde_json::json!({
        "message_id": id, "date": 1764411500, "text": text,
        "chat": { "id": chat, "type": if chat < 0 { "group" } else { "private" } },
        "from": { "id": user, "is_bot": false, "first_name": "Ada", "username": "ada" },
    })
}

/// A message update, as Telegram delivers it.
fn telegram_update(message: Value) -> Value {
    serde_json::json!({ "update_id": 7001, "message": message })
}

#[test]
fn every_telegram_fixture_reads_as_the_bot_apis_update_and_a_cut_one_asking_for_work_is_refused() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/telegram");
    let mut read = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let body: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        read_update(&body).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        read += 1;
    }
    assert!(read >= 7, "only {read} fixtures in {}", dir.display());
    let config = config("[intake]\nallow_repos = [\"acme/*\"]").unwrap();
    let whole = telegram_update(telegram_message_json(
        31,
        -100,
        5,
        "/new acme/app Fix the redirect",
    ));
    let (key, _) = created(telegram_message(&whole, &config.telegram()));
    assert_eq!(key, "telegram:-100:31");
    // Without the Bot API's `date` and the chat's `type`: not Telegram's message, said so, nothing made.
    let cut = serde_json::json!({ "update_id": 7002, "message": {
        "message_id": 32, "chat": { "id": -100 }, "from": { "id": 5, "is_bot": false, "first_name": "Ada" },
        "text": "/new acme/app Fix the redirect",
    } });
    let refused = reason(telegram_message(&cut, &config.telegram()));
    assert!(
        refused.starts_with("an update that does not read as the Bot API's Update:")
            && refused.contains("missing field"),
        "{refused}"
    );
    // Unreadable chatter that asks for nothing is not intake's business.
    let mut chatter = cut.clone();
    chatter["message"]["text"] = serde_json::json!("hello");
    assert_eq!(
        telegram_message(&chatter, &config.telegram()),
        Decision::NotIntake
    );
}

/// A whole label as GitHub sends one (octocrab's model reads nothing less).
fn github_label(name: &str) -> Value {
    serde_json::json!({
        "id": 1362934389, "node_id": "MDU6TGFiZWwxMzYyOTM0Mzg5",
        "url": format!("https://api.github.com/repos/acme/app/labels/{name}"),
        "name": name, "color": "d73a4a", "default": false, "description": null,
    })
}

/// GitHub's `issues` delivery (the `opened` fixture) with `action`, for `repo#number`, carrying `labels`, by an
/// author of `association`, as of 2026-11-29T10:15:03Z.
fn github_payload(
    action: &str,
    repo: &str,
    number: u64,
    labels: &[&str],
    association: &str,
) -> Value {
    let mut body: Value = serde_json::from_str(include_str!(
        "../../../../tests/fixtures/github/issues/opened.payload.json"
    ))
    .unwrap();
    body["action"] = serde_json::json!(action);
    body["repository"]["full_name"] = serde_json::json!(repo);
    body["issue"]["number"] = serde_json::json!(number);
    body["issue"]["labels"] = labels.iter().map(|l| github_label(l)).collect();
    body["issue"]["author_association"] = serde_json::json!(association);
    body["issue"]["updated_at"] = serde_json::json!("2026-11-29T10:15:03Z");
    if action == "closed" {
        body["issue"]["state"] = serde_json::json!("closed");
    }
    body
}

#[test]
fn every_issues_fixture_reads_through_octocrabs_model_of_the_issue() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/github/issues");
    let (mut read, mut misfits) = (0, Vec::new());
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let body: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let action = body["action"].as_str().unwrap().to_owned();
        match github_issue::IssuesEvent::read(&body) {
            Ok(event) => {
                assert!(event.issue.number > 0 && !event.repository.full_name.is_empty());
                read += 1;
            }
            Err(e) => misfits.push((action, e)),
        }
    }
    assert!(read >= 26, "only {read} fixtures in {}", dir.display());
    // GitHub's pinned and unpinned events carry a cut-down issue (no `state`); intake reads neither action.
    misfits.sort();
    let actions: Vec<&str> = misfits.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(actions, ["pinned", "unpinned"], "{misfits:?}");
    assert!(
        misfits
            .iter()
            .all(|(_, e)| e.contains("missing field `state`")),
        "{misfits:?}"
    );
}

#[test]
fn an_issue_that_does_not_read_as_githubs_is_refused_saying_why_and_makes_nothing() {
    let config = config("[intake]\nallow_repos = [\"acme/*\"]").unwrap();
    let whole = github_payload("labeled", "acme/app", 7, &["pidevops"], "OWNER");
    let (key, _) = created(github_issue::github_issue(&whole, &config.github()));
    assert_eq!(key, "github:acme/app#7");
    // A hand-made body with only the fields a by-name reader would look at: not GitHub's issue.
    let short = serde_json::json!({
        "action": "labeled", "repository": { "full_name": "acme/app" }, "sender": { "login": "me" },
        "issue": { "number": 7, "title": "Add a CHANGELOG", "labels": [{ "name": "pidevops" }],
                   "author_association": "OWNER", "user": { "login": "me" } },
    });
    let refused = reason(github_issue::github_issue(&short, &config.github()));
    assert!(
        refused.starts_with(
            "an issues event that does not read as GitHub's issues event: missing field"
        ),
        "{refused}"
    );
    // Unreadable and not naming the intake label: no more intake's business than any unlabeled issue.
    let mut unasked = short.clone();
    unasked["issue"]["labels"] = serde_json::json!([{ "name": "bug" }]);
    assert_eq!(
        github_issue::github_issue(&unasked, &config.github()),
        Decision::NotIntake
    );
    // A label GitHub would send whole, cut to its name: refused too, naming what is missing.
    let mut cut = whole.clone();
    cut["issue"]["labels"] = serde_json::json!([{ "name": "pidevops" }]);
    assert!(reason(github_issue::github_issue(&cut, &config.github())).contains("missing field"));
    // A withdrawal is never guessed from an unreadable body either.
    let mut closed = github_payload("closed", "acme/app", 7, &["pidevops"], "OWNER");
    closed["issue"]["updated_at"] = serde_json::json!("yesterday");
    assert!(
        reason(github_withdrawal("closed", &closed, &config.github()))
            .contains("does not read as GitHub's issues event")
    );
}

#[test]
fn unknown_intake_keys_are_refused_naming_them() {
    for (text, refusal) in [
        (
            "[intake]\nallow_repo = [\"acme/*\"]",
            "[intake] allow_repo: unknown key; did you mean allow_repos?",
        ),
        (
            "[intake.github]\nlabels = \"x\"",
            "[intake.github] labels: unknown key; did you mean label?",
        ),
        (
            "[intake.linear]\nstates = \"x\"",
            "[intake.linear] states: unknown key; did you mean state?",
        ),
    ] {
        assert_eq!(config(text).unwrap_err(), refusal);
    }
    let ok = config("[intake]\nallow_repos = [\"acme/*\"]\ndefault_repo = \"acme/api\"").unwrap();
    assert!(ok
        .shared
        .allowed_repos
        .check(&"acme/web".parse().unwrap())
        .is_ok());
}

#[test]
fn telegram_commands_need_an_allowed_chat_and_when_listed_an_allowed_user() {
    let chats: BTreeSet<i64> = [-100].into_iter().collect();
    let users: BTreeSet<i64> = [5].into_iter().collect();
    assert_eq!(
        telegram_refusal(&chats, None, -100, Some(66)),
        None,
        "unset: any member"
    );
    assert_eq!(telegram_refusal(&chats, Some(&users), -100, Some(5)), None);
    for (chat, user, why) in [
        (-200, Some(5), "chat -200 is not in TELEGRAM_ALLOWED_CHATS"),
        (-100, Some(66), "user 66 is not in TELEGRAM_ALLOWED_USERS"),
        (-100, None, "without a sender"),
    ] {
        let refused = telegram_refusal(&chats, Some(&users), chat, user).unwrap();
        assert!(refused.contains(why), "{refused}");
    }
    let error = crate::config::Settings::from_env(&crate::config::Env::from_pairs([(
        "TELEGRAM_ALLOWED_USERS",
        "5, ada",
    )]))
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("TELEGRAM_ALLOWED_USERS") && error.contains("ada"),
        "{error}"
    );
}

#[test]
fn directive_lines_are_read_once_and_kept_out_of_the_scope() {
    let description = "repo: acme/billing\nRetry failed Stripe webhooks.\n\nDone when: retries are idempotent\nNotes: keep the queue";
    assert_eq!(
        linear_scope(description),
        "Retry failed Stripe webhooks.\n\nNotes: keep the queue"
    );
    assert_eq!(
        done_when(description).as_deref(),
        Some("retries are idempotent")
    );
    // Only the first matching line is a directive; the case of the prefix does not matter.
    assert_eq!(
        take_line("DONE WHEN: a\ndone when: b", DONE_WHEN),
        (Some("a".to_owned()), "done when: b".to_owned())
    );
    // A bare prefix with no value is not a directive and stays.
    assert_eq!(
        take_line("Done when:\nbody", DONE_WHEN),
        (None, "Done when:\nbody".to_owned())
    );
    assert_eq!(linear_scope("no directives here"), "no directives here");
}

/// The decision's draft, for a `Create`.
fn created(decision: Decision) -> (String, Draft) {
    match decision {
        Decision::Create { key, draft } => (key, *draft),
        other => panic!("not a creation: {other:?}"),
    }
}

fn reason(decision: Decision) -> String {
    match decision {
        Decision::Ignore { reason } => reason,
        other => panic!("not a refusal: {other:?}"),
    }
}

#[test]
fn the_plan_label_makes_a_plan_where_a_task_would_be_made_and_only_with_a_planner() {
    let planner =
        config("[dispatch]\nplanner = \"claude\"\n[intake]\nallow_repos = [\"acme/*\"]").unwrap();
    let without = config("[intake]\nallow_repos = [\"acme/*\"]").unwrap();
    assert!(planner.shared.planner && !without.shared.planner);
    let issue = |labels: &[&str], association: &str| {
        let mut body = github_payload("labeled", "acme/billing", 12, labels, association);
        body["issue"]["title"] = serde_json::json!("Split billing into services");
        body["issue"]["body"] = serde_json::json!("Done when: each deploys alone");
        body
    };
    let (key, draft) = created(github_issue(
        &issue(&["pidevops", "pidevops:plan", "agent:codex"], "MEMBER"),
        &planner.github(),
    ));
    assert_eq!(
        key, "github:acme/billing#12",
        "the same key a task would have"
    );
    assert_eq!(draft.family.kind, crate::tasks::TaskKind::Plan);
    assert_eq!(draft.spec.task(), "Split billing into services");
    assert_eq!(draft.spec.done_when(), "each deploys alone");
    assert_eq!(draft.agent, None, "a plan's agent is the planner");
    assert!(draft.links.has(GITHUB_ISSUE));
    // The same issue without the plan label is a task; the plan label alone is not intake's business.
    let (_, task) = created(github_issue(
        &issue(&["pidevops"], "MEMBER"),
        &planner.github(),
    ));
    assert_eq!(task.family.kind, crate::tasks::TaskKind::Task);
    assert_eq!(
        github_issue(&issue(&["pidevops:plan"], "OWNER"), &planner.github()),
        Decision::NotIntake
    );
    // A stranger's plan label is refused like a stranger's task, and without a planner nothing is made.
    assert!(reason(github_issue(
        &issue(&["pidevops", "pidevops:plan"], "NONE"),
        &planner.github()
    ))
    .contains("NONE"));
    let refused = reason(github_issue(
        &issue(&["pidevops", "pidevops:plan"], "MEMBER"),
        &without.github(),
    ));
    assert!(
        refused.contains("no planner profile is configured")
            && refused.contains("[dispatch] planner"),
        "{refused}"
    );

    // An agent session: the labels are read from its prompt context.
    let session = |labels: &str| {
        serde_json::json!({
            "agentSession": { "id": "s-1", "issueId": "9c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f",
                "issue": { "id": "9c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f", "identifier": "ENG-9" } },
            "promptContext": format!(
                "<issue identifier=\"ENG-9\">\n<title>Split billing</title>\n<description>repo: acme/billing</description>\n{labels}\n</issue>"
            ),
        })
    };
    let (key, draft) = created(agent_session_created(
        &session("<labels><label>bug</label><label>pidevops:plan</label></labels>"),
        &planner.linear(),
    ));
    assert_eq!(key, "linear:9c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f");
    assert_eq!(draft.family.kind, crate::tasks::TaskKind::Plan);
    let (_, task) = created(agent_session_created(
        &session("<labels><label>bug</label></labels>"),
        &planner.linear(),
    ));
    assert_eq!(task.family.kind, crate::tasks::TaskKind::Task);
    assert!(reason(agent_session_created(
        &session("<labels><label>pidevops:plan</label></labels>"),
        &without.linear()
    ))
    .contains("no planner profile"));
}

#[test]
fn telegram_plan_makes_a_plan_keyed_by_its_message_and_says_why_not() {
    let planner =
        config("[dispatch]\nplanner = \"claude\"\n[intake]\nallow_repos = [\"acme/*\"]").unwrap();
    let without = config("[intake]\nallow_repos = [\"acme/*\"]").unwrap();
    let message = |chat: i64, text: &str| telegram_update(telegram_message_json(31, chat, 5, text));
    let (key, draft) = created(telegram_message(
        &message(
            -100,
            "/plan@pidevops_bot acme/app Split the app into three services",
        ),
        &planner.telegram(),
    ));
    assert_eq!(key, "telegram:-100:31");
    assert_eq!(draft.family.kind, crate::tasks::TaskKind::Plan);
    assert_eq!(draft.spec.task(), "Split the app into three services");
    let stranger = reason(telegram_message(
        &message(-999, "/plan acme/app x"),
        &planner.telegram(),
    ));
    assert!(stranger.contains("/plan from ada") && stranger.contains("TELEGRAM_ALLOWED_CHATS"));
    assert!(reason(telegram_message(
        &message(-100, "/plan acme/app x"),
        &without.telegram()
    ))
    .contains("no planner"));
    assert!(reason(telegram_message(
        &message(-100, "/plan other/app x"),
        &planner.telegram()
    ))
    .contains("other/app is not an allowed repository"));
    assert!(reason(telegram_message(
        &message(-100, "/plan acme/app"),
        &planner.telegram()
    ))
    .starts_with("usage: /plan"));
    assert_eq!(
        telegram_message(&message(-100, "/planet acme/app x"), &planner.telegram()),
        Decision::NotIntake
    );
}

#[test]
fn a_telegram_reply_names_the_message_it_answers_and_who_may_not() {
    let config = config("").unwrap();
    let reply = |chat: i64, user: i64, text: &str, to: Option<i64>| {
        let mut message = telegram_message_json(40, chat, user, text);
        if let Some(to) = to {
            message["reply_to_message"] = telegram_message_json(to, chat, 4242, "the question");
        }
        telegram_message(&telegram_update(message), &config.telegram())
    };
    let Decision::Reply {
        to,
        text,
        origin,
        refusal,
    } = reply(-100, 5, "  The order's currency. ", Some(12))
    else {
        panic!("a reply")
    };
    assert_eq!(
        (
            to.source,
            to.conversation.as_str(),
            to.message.as_str(),
            text.as_str()
        ),
        (Source::Telegram, "-100", "12", "The order's currency.")
    );
    assert_eq!(to.stream(), "telegram-message:-100:12");
    assert_eq!(to.notice_key("e-1"), "telegram:notify:-100:e-1");
    assert_eq!(origin.key(), "telegram:-100:40");
    assert_eq!(origin.from(), "@ada in Telegram");
    assert_eq!(refusal, None);
    let Decision::Reply { refusal, .. } = reply(-999, 5, "x", Some(12)) else {
        panic!("a reply")
    };
    assert!(refusal.unwrap().contains("TELEGRAM_ALLOWED_CHATS"));
    assert_eq!(reply(-100, 5, "not a reply", None), Decision::NotIntake);
    assert_eq!(reply(-100, 5, "/status", Some(12)), Decision::NotIntake);
    assert_eq!(reply(-100, 5, "   ", Some(12)), Decision::NotIntake);
}

#[test]
fn a_linear_prompt_carries_its_activity_as_the_answers_origin() {
    let body = serde_json::json!({
        "action": "prompted", "type": "AgentSessionEvent",
        "agentSession": { "id": "as-1", "issueId": "issue-1" },
        "agentActivity": { "id": "aa-9", "content": { "type": "prompt", "body": "Use euros." },
            "user": { "name": "Ada Lovelace" } },
    });
    let at = chrono::Utc::now();
    let event = StoredEvent {
        position: 1,
        id: uuid::Uuid::now_v7(),
        source: "linear".to_owned(),
        event_type: "linear.AgentSessionEvent.prompted".to_owned(),
        dedup_key: "d-1".to_owned(),
        stream: None,
        stream_version: None,
        occurred_at: at,
        recorded_at: at,
        action: None,
        repository: None,
        number: None,
        reference: None,
        content_type: "application/json".to_owned(),
        body: serde_json::to_vec(&body).unwrap(),
        meta: Default::default(),
    };
    let Decision::FollowUp { key, text, origin } = decide(&event, &Rig::default()) else {
        panic!("a follow-up")
    };
    assert_eq!(
        (key.as_str(), text.as_str()),
        ("linear:issue-1", "Use euros.")
    );
    let origin = origin.expect("an origin");
    assert_eq!(origin.key(), "linear:activity:aa-9");
    assert_eq!(origin.from(), "Ada Lovelace in Linear");
}

mod withdrawals;

#[test]
fn a_github_issue_makes_no_work_for_a_gitlab_repository_of_the_same_name() {
    let rig = config(
        "[repos.\"acme/app\"]\nprovider = \"gitlab\"\nurl = \"https://gitlab.example.com/acme/app.git\"\n\
         [repos.\"acme/web\"]",
    )
    .unwrap();
    let refused = github_issue(
        &github_payload("opened", "acme/app", 7, &["pidevops"], "MEMBER"),
        &rig.github(),
    );
    let Decision::Ignore { reason } = refused else {
        panic!("{refused:?}")
    };
    assert!(
        reason.contains("acme/app is a gitlab repository"),
        "{reason}"
    );
    let made = github_issue(
        &github_payload("opened", "acme/web", 7, &["pidevops"], "MEMBER"),
        &rig.github(),
    );
    assert!(matches!(made, Decision::Create { .. }), "{made:?}");
}
