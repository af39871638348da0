use std::time::Duration;

use chrono::{TimeZone, Utc};

use super::*;

fn at(seconds: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_750_000_000 + seconds, 0)
        .single()
        .expect("a valid time")
}

fn requested() -> EffectEvent {
    EffectEvent::Requested {
        at: at(0),
        key: "github:pr:T-1".into(),
        task: Some("T-1".parse().unwrap()),
        action: Action::GithubOpenPullRequest {
            repo: "acme/app".parse().unwrap(),
            head: "pidevops/T-1".parse().unwrap(),
            base: "main".into(),
            title: "T-1: Fix it".into(),
            body: "## Task\nFix it\n".into(),
        },
        cause_position: 42,
    }
}

fn started(attempt: u32) -> EffectEvent {
    EffectEvent::Started {
        at: at(1),
        key: "github:pr:T-1".into(),
        attempt,
    }
}

fn failed(attempt: u32, retry_at: Option<DateTime<Utc>>) -> EffectEvent {
    EffectEvent::Failed {
        at: at(2),
        key: "github:pr:T-1".into(),
        attempt,
        error: "GitHub answered 502".into(),
        retry_at,
    }
}

/// The task after `command`, and the events it recorded.
fn apply(
    task: Option<crate::tasks::Task>,
    command: crate::tasks::Command,
) -> (crate::tasks::Task, Vec<crate::tasks::TaskEvent>) {
    let events = crate::tasks::decide(task.as_ref(), &command, at(0)).unwrap();
    let mut task = task;
    for event in &events {
        task = Some(crate::tasks::evolve(task, event).unwrap());
    }
    (task.unwrap(), events)
}

#[test]
fn an_effects_state_follows_its_stream() {
    assert_eq!(state(&[]), State::Unknown);
    assert_eq!(
        state(&[requested()]),
        State::Pending {
            attempts: 0,
            due: None
        }
    );
    assert_eq!(
        state(&[requested(), started(1)]),
        State::InDoubt { attempt: 1 },
        "started without an outcome: cut off mid-call"
    );
    assert_eq!(
        state(&[requested(), started(1), failed(1, Some(at(60)))]),
        State::Pending {
            attempts: 1,
            due: Some(at(60))
        }
    );
    assert_eq!(
        state(&[requested(), started(1), failed(1, None)]),
        State::Failed
    );
    let succeeded = EffectEvent::Succeeded {
        at: at(3),
        key: "github:pr:T-1".into(),
        attempt: 2,
        produced: Produced::PullRequest {
            repo: "acme/app".parse().unwrap(),
            number: 7,
            url: "https://github.com/acme/app/pull/7".into(),
            opened: true,
        },
    };
    assert_eq!(
        state(&[
            requested(),
            started(1),
            failed(1, Some(at(60))),
            started(2),
            succeeded.clone()
        ]),
        State::Succeeded
    );
    let withheld = EffectEvent::Withheld {
        at: at(4),
        key: "github:pr:T-1".into(),
        reason: "effect cap: 20 outbound calls for T-1 in the last hour".into(),
    };
    assert_eq!(state(&[requested(), withheld.clone()]), State::Withheld);
    // Held back after a transient failure: settled, its retry time no longer matters.
    assert_eq!(
        state(&[
            requested(),
            started(1),
            failed(1, Some(at(60))),
            withheld.clone()
        ]),
        State::Withheld
    );
    // Every event round-trips through the log's JSON, with the action's fields beside the request's.
    for event in [
        requested(),
        started(1),
        failed(1, Some(at(60))),
        succeeded,
        withheld,
    ] {
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["type"], event.kind().trim_start_matches("effect."));
        assert_eq!(serde_json::from_value::<EffectEvent>(json).unwrap(), event);
    }
    let json = serde_json::to_value(requested()).unwrap();
    assert_eq!(json["action"], "github_open_pull_request");
    assert_eq!(json["head"], "pidevops/T-1");
}

#[test]
fn retries_back_off_honour_the_provider_and_stop() {
    let now = at(0);
    assert_eq!(retry_at(now, 1, None), Some(at(2)));
    assert_eq!(retry_at(now, 2, None), Some(at(4)));
    assert_eq!(retry_at(now, 5, None), Some(at(32)));
    assert_eq!(
        retry_at(now, 3, Some(Duration::from_secs(90))),
        Some(at(90)),
        "Retry-After wins"
    );
    assert_eq!(retry_at(now, MAX_ATTEMPTS, None), None, "no attempts left");
    assert!(retry_at(now, MAX_ATTEMPTS - 1, None).unwrap() <= at(600));
}

#[test]
fn a_task_in_review_asks_for_one_pull_request_to_its_repositorys_base() {
    use crate::tasks::{
        ApprovalPolicy, Command, GithubRef, LinearIssue, Links, MaxAttempts, NewTask, Priority,
        RunId, Spec,
    };
    let repo: crate::tasks::RepoName = "acme/app".parse().unwrap();
    let new = NewTask {
        id: "T-9".parse().unwrap(),
        repo: repo.clone(),
        spec: Spec::new("Fix the login redirect", "src/auth", "the e2e test passes").unwrap(),
        priority: Priority::Normal,
        links: Links {
            github_issue: Some(GithubRef::new(repo.clone(), 12).unwrap()),
            linear_issue: Some(LinearIssue::new(uuid::Uuid::from_u128(5), "ENG-4").unwrap()),
            ..Links::default()
        },
        approval: ApprovalPolicy::Auto,
        max_attempts: MaxAttempts::new(3).unwrap(),
        ticket_version: None,
        agent: None,
        family: Default::default(),
    };
    let (task, _) = apply(None, Command::Create(Box::new(new)));
    let run = RunId(uuid::Uuid::from_u128(1));
    let (task, started) = apply(Some(task), Command::Start { run });
    let config = policy::PolicyConfig {
        bases: [(repo.clone(), "develop".to_owned())].into_iter().collect(),
        telegram_chats: vec![-100],
        ..Default::default()
    };
    assert!(
        policy::github(&started[0], &task, &config).is_empty(),
        "a start asks for nothing"
    );
    let (task, submitted) = apply(
        Some(task),
        Command::SubmitForReview {
            run,
            branch: "pidevops/T-9".parse().unwrap(),
            pr: None,
            report: Default::default(),
        },
    );
    let requests = policy::github(&submitted[0], &task, &config);
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].key, "github:pr:T-9",
        "one pull request per task, whatever the attempt"
    );
    let Action::GithubOpenPullRequest {
        head,
        base,
        title,
        body,
        ..
    } = &requests[0].action
    else {
        panic!("a pull request: {requests:?}");
    };
    assert_eq!((head.as_str(), base.as_str()), ("pidevops/T-9", "develop"));
    assert_eq!(title, "T-9: Fix the login redirect");
    assert_eq!(
        body,
        "## Task\nFix the login redirect\n\n## Scope\nsrc/auth\n\n## Done when\nthe e2e test passes\n\n---\n\
         From: Closes #12, Linear ENG-4\nOpened by pidevops for T-9 after attempt 1 of 3.\n"
    );

    // Once it is open, the issue the task came from hears of it, once.
    let comments =
        policy::after_pull_request(&task, 31, "https://github.com/acme/app/pull/31", at(5));
    assert_eq!(comments.len(), 1);
    assert_eq!(comments[0].key, "github:comment:T-9:pull-request");
    let Action::GithubComment {
        repo: on,
        number,
        body,
        since,
    } = &comments[0].action
    else {
        panic!("a comment: {comments:?}");
    };
    assert_eq!((on.as_str(), *number), ("acme/app", 12));
    assert_eq!(
        body,
        "pidevops worked on this as T-9 and opened #31 for review (attempt 1 of 3).\n\n\
         <!-- pidevops:github:comment:T-9:pull-request -->"
    );
    assert_eq!(*since, at(5) - chrono::Duration::minutes(10));

    // Telegram hears of the review, once per chat, keyed by the event.
    assert!(policy::telegram_notifies(&submitted[0]));
    assert!(
        !policy::telegram_notifies(&started[0]),
        "a start is not news"
    );
    let told = policy::telegram(&submitted[0], &task, "e-1", &config.telegram_chats);
    assert_eq!(told.len(), 1);
    assert_eq!(told[0].key, "telegram:notify:-100:e-1");
    assert_eq!(
        told[0].action,
        Action::TelegramSend {
            chat: -100,
            html: "👀 <b>T-9</b> Fix the login redirect <i>(acme/app)</i>\nready for review on \
                   <code>pidevops/T-9</code> (attempt 1 of 3)"
                .into(),
            buttons: Vec::new(),
            reply_prompt: None,
        }
    );
    assert!(
        !told[0].action.safe_to_repeat(),
        "a message cut off is never sent twice"
    );
}

#[test]
fn a_message_fits_telegram_and_never_ends_inside_an_escape() {
    use crate::providers::telegram::{escape, fit, MAX_MESSAGE};
    assert_eq!(escape("a < b & c > d"), "a &lt; b &amp; c &gt; d");
    let short = "short";
    assert_eq!(fit(short), short);
    let long = format!("{}{}", "x".repeat(MAX_MESSAGE - 3), "&amp;&amp;&amp;");
    let fitted = fit(&long);
    assert!(
        fitted.chars().count() <= MAX_MESSAGE,
        "{}",
        fitted.chars().count()
    );
    assert!(
        fitted.ends_with("x\n…"),
        "cut before the escape: {}",
        &fitted[fitted.len() - 12..]
    );
}

#[test]
fn bot_commands_parse_with_or_without_the_bot_name() {
    use super::bot::{parse, BotCommand};
    use crate::board::Steer;
    use crate::tasks::Column;
    let t1: crate::tasks::TaskId = "T-1".parse().unwrap();
    assert_eq!(parse("hello"), None, "not a command");
    assert_eq!(parse("/status"), Some(Ok(BotCommand::Status)));
    assert_eq!(parse("/status@pidevops_bot"), Some(Ok(BotCommand::Status)));
    assert_eq!(parse("  /help  "), Some(Ok(BotCommand::Help)));
    assert_eq!(
        parse("/tasks in-review"),
        Some(Ok(BotCommand::Tasks(Some(Column::InReview))))
    );
    assert_eq!(parse("/tasks"), Some(Ok(BotCommand::Tasks(None))));
    assert_eq!(
        parse("/approve@bot T-1"),
        Some(Ok(BotCommand::Steer(Steer::Approve, t1)))
    );
    assert_eq!(
        parse("/cancel T-1 it is a duplicate"),
        Some(Ok(BotCommand::Steer(Steer::Cancel, t1)))
    );
    assert_eq!(parse("/plan acme/app Split it"), Some(Ok(BotCommand::Plan)));
    assert_eq!(
        parse("/reject T-1"),
        Some(Ok(BotCommand::Steer(Steer::Reject, t1)))
    );
    assert_eq!(
        parse("/reject@bot T-1   Merge A and B "),
        Some(Ok(BotCommand::Reject(t1, "Merge A and B".into()))),
        "a rejection carries its comment"
    );
    assert_eq!(parse("/retry"), Some(Err("usage: /retry T-n".into())));
    assert!(matches!(parse("/task 42"), Some(Err(e)) if e.contains("T-<n>")));
    assert!(matches!(parse("/tasks sideways"), Some(Err(_))));
    assert_eq!(
        parse("/deploy"),
        Some(Err("unknown command /deploy; /help lists them".into()))
    );
}

#[test]
fn a_repeated_notice_inside_the_cooldown_is_held_back_and_does_not_restart_it() {
    let review = "task.submitted_for_review";
    let minutes = |m: i64| at(m * 60);
    let history = [
        (1, minutes(0), "task.created"),
        (2, minutes(1), review),
        (3, minutes(2), "task.retried"),
        (4, minutes(5), review),
        (5, minutes(9), review),
        (6, minutes(12), review),
        (7, minutes(13), "task.flagged_needs_human"),
        (8, minutes(14), "task.flagged_needs_human"),
    ];
    let cooldown = chrono::Duration::minutes(10);
    let held: Vec<i64> = (1..=8)
        .filter(|p| policy::repeat_in_cooldown(&history, *p, cooldown))
        .collect();
    // 4 and 5 come within 10 minutes of 2; 6 comes 11 minutes after 2 (held ones do not count); 8 repeats 7.
    assert_eq!(held, [4, 5, 8]);
    assert!(
        !(1..=8).any(|p| policy::repeat_in_cooldown(&history, p, chrono::Duration::zero())),
        "a zero cooldown holds nothing back"
    );
    assert!(!policy::repeat_in_cooldown(&history, 99, cooldown));
}

/// Whether GitHub could read `text` as a mention, an issue reference, a closing keyword or an entity that renders
/// into one of those (a stricter reading than GitHub's own: anything it might take counts).
fn live_for_github(text: &str) -> Option<String> {
    const ZWSP: char = '\u{200B}';
    let chars: Vec<char> = text.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        let next = chars.get(i + 1).copied();
        match c {
            '@' if next != Some(ZWSP) => return Some(format!("a live @ at {i}")),
            '#' if next.is_some_and(|n| !n.is_whitespace() && n != '#' && n != ZWSP) => {
                return Some(format!("a live # reference at {i}"))
            }
            '&' if next.is_some_and(|n| n == '#' || n.is_ascii_alphabetic())
                && !chars[i..].starts_with(&['&', 'a', 'm', 'p', ';']) =>
            {
                return Some(format!("an entity at {i}"))
            }
            _ => {}
        }
    }
    // GitHub's closing syntax: a keyword, an optional colon, spaces, then what it closes.
    let closing = regex::Regex::new(
        r"(?i)\b(close[sd]?|fix(e[sd])?|resolve[sd]?):?\s+(#|[\w.-]+/[\w.-]+#|https?://|gh-\d|&)",
    )
    .unwrap();
    if let Some(found) = closing.find(text) {
        return Some(format!("the closing reference {:?}", found.as_str()));
    }
    let lower = text.to_ascii_lowercase();
    lower
        .match_indices("gh-")
        .any(|(at, _)| lower[at + 3..].starts_with(|c: char| c.is_ascii_digit()))
        .then(|| "a GH- reference".to_owned())
}

#[test]
fn ticket_text_cannot_ping_or_close_anything_on_github_and_stays_readable() {
    let hostile = [
        "@octocat please look",
        "cc @acme/security-team",
        "ping\n@admin",
        "(@root)",
        "`@inline`",
        "fixes #1",
        "Fixes #1",
        "FIXES: #1",
        "closes acme/other#7",
        "Closed #3, resolved #4 and Resolves: #5",
        "fix https://github.com/acme/app/issues/9",
        "close\tGH-12",
        "Fixes\n#8",
        "fix(#9)",
        "prefix-fixes #2",
        "see #12 and acme/app#13",
        "&#64;octocat and &commat;octocat and &#x40;octocat",
        "&#35;12 fixes",
        "fi&#120;es #1",
        "email me at ops@acme.example",
        "@\u{200B}already inert",
        "## Heading stays a heading\n# and so does this",
    ];
    for text in hostile {
        let out = policy::inert(text);
        assert_eq!(live_for_github(&out), None, "{text:?} became {out:?}");
        // Readable: the same text once the invisible spaces and the escaped ampersands are taken out.
        assert_eq!(
            out.replace('\u{200B}', "").replace("&amp;", "&"),
            text.replace('\u{200B}', ""),
            "{text:?}"
        );
    }
    assert_eq!(
        policy::inert("## Heading\n# Top"),
        "## Heading\n# Top",
        "headings are not references"
    );
    for plain in [
        "Fix the login redirect",
        "It closes the gap; resolved by hand",
    ] {
        assert_eq!(policy::inert(plain), plain, "plain words stay as typed");
    }
}

/// The agent's own summary (`.pidevops/status.json`) in the pull request: plain text, like the review's. No
/// link, image, HTML, heading or mention it wrote takes effect.
#[test]
fn the_agents_summary_in_a_pull_request_is_plain_and_inert() {
    use crate::tasks::{
        ApprovalPolicy, AttemptReport, Command, Links, MaxAttempts, NewTask, Priority, RunId, Spec,
    };
    let new = NewTask {
        id: "T-9".parse().unwrap(),
        repo: "acme/app".parse().unwrap(),
        spec: Spec::new("Fix the login redirect", "", "").unwrap(),
        priority: Priority::Normal,
        links: Links::default(),
        approval: ApprovalPolicy::Auto,
        max_attempts: MaxAttempts::new(3).unwrap(),
        ticket_version: None,
        agent: None,
        family: Default::default(),
    };
    let (task, _) = apply(None, Command::Create(Box::new(new)));
    let run = RunId(uuid::Uuid::from_u128(1));
    let (task, _) = apply(Some(task), Command::Start { run });
    let summary = "# Done\n[Approve here](https://evil.example) <img src=x onerror=alert(1)> ![p](https://evil.example/p.png)\nFixes #1, cc @acme/everyone";
    let (task, submitted) = apply(
        Some(task),
        Command::SubmitForReview {
            run,
            branch: "pidevops/T-9".parse().unwrap(),
            pr: None,
            report: Box::new(AttemptReport {
                summary: Some(summary.to_owned()),
                ..AttemptReport::default()
            }),
        },
    );
    let requests = policy::github(&submitted[0], &task, &policy::PolicyConfig::default());
    let Action::GithubOpenPullRequest { body, .. } = &requests[0].action else {
        panic!("a pull request: {requests:?}");
    };
    let section = body
        .split_once("## The agent's summary\n")
        .and_then(|(_, rest)| rest.split_once("\n---\n"))
        .map(|(section, _)| section)
        .unwrap_or_else(|| panic!("{body}"));
    assert_eq!(live_for_github(section), None, "{section:?}");
    assert!(!section.starts_with('#'), "a heading: {section:?}");
    for markup in ["[Approve here](", "![p]("] {
        assert!(!section.contains(markup), "{markup} live in {section:?}");
    }
    let html = regex::Regex::new(r"(^|[^\\])<").unwrap();
    assert!(!html.is_match(section), "live HTML: {section:?}");
    // Still readable: the escapes taken out, the agent's words are all there.
    let read = section.replace(['\u{200B}', '\\'], "");
    assert!(
        read.contains("[Approve here](https://evil.example)"),
        "{read}"
    );
    assert!(read.contains("Fixes #1, cc @acme/everyone"), "{read}");
}

#[test]
fn a_pull_request_from_hostile_ticket_text_has_no_live_mention_or_closing_keyword() {
    use crate::tasks::{
        ApprovalPolicy, Command, GithubRef, Links, MaxAttempts, NewTask, Priority, RepoName, RunId,
        Spec,
    };
    let repo: RepoName = "acme/app".parse().unwrap();
    let new = NewTask {
        id: "T-9".parse().unwrap(),
        repo: repo.clone(),
        spec: Spec::new(
            "Fixes #1 for @acme/everyone",
            "closes acme/app#2, cc @octocat",
            "Resolved: GH-3 &#64;admin",
        )
        .unwrap(),
        priority: Priority::Normal,
        links: Links {
            github_issue: Some(GithubRef::new(repo.clone(), 12).unwrap()),
            ..Links::default()
        },
        approval: ApprovalPolicy::Auto,
        max_attempts: MaxAttempts::new(3).unwrap(),
        ticket_version: None,
        agent: None,
        family: Default::default(),
    };
    let (task, _) = apply(None, Command::Create(Box::new(new)));
    let run = RunId(uuid::Uuid::from_u128(1));
    let (task, _) = apply(Some(task), Command::Start { run });
    let (task, submitted) = apply(
        Some(task),
        Command::SubmitForReview {
            run,
            branch: "pidevops/T-9".parse().unwrap(),
            pr: None,
            report: Default::default(),
        },
    );
    let requests = policy::github(&submitted[0], &task, &policy::PolicyConfig::default());
    let Action::GithubOpenPullRequest { title, body, .. } = &requests[0].action else {
        panic!("a pull request: {requests:?}");
    };
    assert_eq!(live_for_github(title), None, "{title:?}");
    let (ticket, ours) = body.split_once("\n---\n").expect("pidevops's own footer");
    assert_eq!(live_for_github(ticket), None, "{ticket:?}");
    // Only pidevops's own line links the source issue.
    assert!(ours.contains("From: Closes #12\n"), "{ours:?}");
    let comments =
        policy::after_pull_request(&task, 31, "https://github.com/acme/app/pull/31", at(5));
    let Action::GithubComment { body, .. } = &comments[0].action else {
        panic!("a comment: {comments:?}");
    };
    assert!(!body.contains("@") && !body.contains("Fixes"), "{body:?}");
}

#[test]
fn linear_hears_each_step_as_comments_or_as_session_activities() {
    use crate::tasks::{
        ApprovalPolicy, Command, LinearIssue, Links, MaxAttempts, NewTask, Priority, Reason, RunId,
        Spec,
    };
    let new = NewTask {
        id: "T-4".parse().unwrap(),
        repo: "acme/app".parse().unwrap(),
        spec: Spec::new("Fix it", "", "").unwrap(),
        priority: Priority::Normal,
        links: Links {
            linear_issue: Some(LinearIssue::new(uuid::Uuid::from_u128(5), "ENG-4").unwrap()),
            ..Links::default()
        },
        approval: ApprovalPolicy::Auto,
        max_attempts: MaxAttempts::new(3).unwrap(),
        ticket_version: None,
        agent: None,
        family: Default::default(),
    };
    let (task, _) = apply(None, Command::Create(Box::new(new)));
    let run = RunId(uuid::Uuid::from_u128(1));
    let (task, started) = apply(Some(task), Command::Start { run });
    let config = policy::PolicyConfig::default();
    let keys =
        |requests: Vec<Request>| -> Vec<String> { requests.into_iter().map(|r| r.key).collect() };
    let linear = |event, session| policy::linear(event, &task, session, Some(run), "e-1", &config);

    assert_eq!(
        keys(linear(&started[0], None)),
        ["linear:state:e-1", "linear:comment:T-4:started"],
        "without a session: the state moves and people hear once that work started"
    );
    assert_eq!(
        keys(linear(&started[0], Some("s-1"))),
        [
            "linear:state:e-1".to_owned(),
            format!("linear:activity:{run}:started")
        ],
        "with a session: an activity instead of the comment"
    );
    let (flagged_task, flagged) = apply(
        Some(task.clone()),
        Command::FlagNeedsHuman {
            reason: Reason::summarize("stuck"),
        },
    );
    let asks = policy::linear(&flagged[0], &flagged_task, None, Some(run), "e-2", &config);
    assert_eq!(keys(asks), ["linear:state:e-2", "linear:comment:e-2"]);
    let (cancelled_task, cancelled) = apply(
        Some(task.clone()),
        Command::Cancel {
            reason: Reason::summarize("not needed"),
        },
    );
    let ends = policy::linear(
        &cancelled[0],
        &cancelled_task,
        Some("s-1"),
        Some(run),
        "e-3",
        &config,
    );
    assert_eq!(
        keys(ends),
        [format!("linear:activity:{run}:end")],
        "a cancel ends the attempt under way, keyed by its run"
    );
}

#[test]
fn a_ready_task_asks_for_one_merge_of_its_head_and_a_waiting_one_for_none() {
    use crate::tasks::{
        ApprovalPolicy, Command, CommitSha, FactName, GithubRef, LandConfig, LandMode, MaxAttempts,
        MergeMethod, NewTask, Priority, RunId, Spec,
    };
    let repo: crate::tasks::RepoName = "acme/app".parse().unwrap();
    let new = NewTask {
        id: "T-9".parse().unwrap(),
        repo: repo.clone(),
        spec: Spec::new("Fix the login redirect", "src/auth", "CI is green").unwrap(),
        priority: Priority::Normal,
        links: Default::default(),
        approval: ApprovalPolicy::Auto,
        max_attempts: MaxAttempts::new(3).unwrap(),
        ticket_version: None,
        agent: None,
        family: Default::default(),
    };
    let run = RunId(uuid::Uuid::from_u128(1));
    let (task, _) = apply(None, Command::Create(Box::new(new)));
    let (task, _) = apply(Some(task), Command::Start { run });
    let (task, _) = apply(
        Some(task),
        Command::SubmitForReview {
            run,
            branch: "pidevops/T-9".parse().unwrap(),
            pr: Some(GithubRef::new(repo.clone(), 4).unwrap()),
            report: Default::default(),
        },
    );
    let sha = CommitSha::new("0123456789abcdef0123456789abcdef01234567").unwrap();
    let (task, _) = apply(
        Some(task),
        Command::RecordCheckPassed {
            sha: sha.clone(),
            name: FactName::new("check", "ci").unwrap(),
        },
    );
    let rules = LandConfig {
        mode: LandMode::Auto,
        approvals: 1,
        required_checks: vec!["ci".into()],
        merge_method: Some(MergeMethod::Rebase),
    };
    assert_eq!(policy::land(&task, &rules), None, "an approval is missing");
    let (task, _) = apply(
        Some(task),
        Command::RecordApproval {
            by: FactName::new("reviewer", "octocat").unwrap(),
            sha: sha.clone(),
        },
    );
    let merge = policy::land(&task, &rules).expect("ready");
    assert_eq!(merge.key, format!("github:merge:T-9:{sha}"));
    assert_eq!(merge.key, policy::merge_key(task.id(), &sha));
    assert_eq!(
        merge.action,
        Action::GithubMergePullRequest {
            repo,
            number: 4,
            sha,
            method: Some(MergeMethod::Rebase),
        }
    );
    assert!(
        merge.action.safe_to_repeat(),
        "it reads the pull request first"
    );
    assert_eq!(merge.action.provider(), Provider::Github);
    let manual = LandConfig {
        mode: LandMode::Manual,
        ..rules
    };
    assert_eq!(policy::land(&task, &manual), None);
}

#[test]
fn a_plans_proposal_is_one_message_per_chat_and_revision_escaped_with_approve_and_reject() {
    use crate::tasks::plan::PlanDocument;
    use crate::tasks::{ApprovalPolicy, Command, Family, MaxAttempts, NewTask, Priority, Spec};
    let plan = |approval| {
        let new = NewTask {
            id: "T-3".parse().unwrap(),
            repo: "acme/app".parse().unwrap(),
            spec: Spec::new("Split <the> app", "", "").unwrap(),
            priority: Priority::Normal,
            links: Default::default(),
            approval,
            max_attempts: MaxAttempts::new(3).unwrap(),
            ticket_version: None,
            agent: None,
            family: Family::plan(),
        };
        apply(None, Command::Create(Box::new(new))).0
    };
    let document = PlanDocument::parse(
        br#"{"version": 1, "summary": "two & done", "items": [
            {"id": "a", "title": "<b>A</b>", "task": "a", "scope": ["a/**"], "done_when": "a", "depends_on": []},
            {"id": "b", "title": "B", "task": "b", "scope": ["b/**"], "done_when": "b", "depends_on": ["a"]}
        ]}"#,
        &crate::tasks::plan::PlanLimits::default(),
    )
    .unwrap();
    let requests =
        policy::telegram_proposal(&document, &plan(ApprovalPolicy::Manual), 2, &[-100, 7]);
    let keys: Vec<&str> = requests.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["telegram:plan:-100:T-3:2", "telegram:plan:7:T-3:2"]);
    let Action::TelegramSend { html, buttons, .. } = &requests[0].action else {
        panic!("a message: {:?}", requests[0].action)
    };
    assert_eq!(
        html,
        "📋 <b>T-3</b> Split &lt;the&gt; app <i>(acme/app)</i>\nplan revision 2: 2 tasks, waiting for approval\
         \n<i>two &amp; done</i>\
         \n• <code>a</code> <b>&lt;b&gt;A&lt;/b&gt;</b> — scope: a/**\
         \n• <code>b</code> <b>B</b> — scope: b/** — after: a\
         \nApprove, or /reject T-3 &lt;what to change&gt; (the planner gets your comment)"
    );
    assert_eq!(
        buttons,
        &[
            ("Approve".to_owned(), "approve:T-3".to_owned()),
            ("Reject".to_owned(), "reject:T-3".to_owned())
        ]
    );
    assert!(buttons.iter().all(|(_, data)| data.len() <= 64));
    // Approved as proposed: said, with nothing to press.
    let auto = policy::telegram_proposal(&document, &plan(ApprovalPolicy::Auto), 1, &[-100]);
    let Action::TelegramSend { html, buttons, .. } = &auto[0].action else {
        panic!("a message")
    };
    assert!(
        html.contains("2 tasks, approved as proposed") && !html.contains("/reject"),
        "{html}"
    );
    assert!(buttons.is_empty());
}

mod github_comments {
    use super::github::{comment_answered, comment_reply};
    use super::*;
    use crate::intake::{CommentOutcome, CommentRecord};
    use crate::tasks::Column;

    fn record(outcome: CommentOutcome) -> CommentRecord {
        CommentRecord {
            repo: "Acme/App".parse().unwrap(),
            number: 12,
            pull_request: false,
            comment: 991,
            login: "ada".into(),
            task: Some("T-7".parse().unwrap()),
            outcome,
            cause_event_id: uuid::Uuid::nil(),
        }
    }

    #[test]
    fn a_comment_gets_eyes_then_one_reply_each_keyed_by_the_comment() {
        let requests = comment_answered(&record(CommentOutcome::Answered), at(0));
        let keys: Vec<&str> = requests.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(
            keys,
            ["github:reaction:acme/app:991", "github:reply:acme/app:991"]
        );
        assert!(requests
            .iter()
            .all(|r| r.task == Some("T-7".parse().unwrap())));
        assert_eq!(
            requests[0].action,
            Action::GithubReaction {
                repo: "Acme/App".parse().unwrap(),
                comment: 991,
                content: "eyes".into()
            }
        );
        let Action::GithubComment { number, body, .. } = &requests[1].action else {
            panic!("a reply: {:?}", requests[1].action);
        };
        assert_eq!(*number, 12);
        assert!(
            body.ends_with("<!-- pidevops:github:reply:acme/app:991 -->"),
            "{body}"
        );
        assert!(Action::GithubReaction {
            repo: "acme/app".parse().unwrap(),
            comment: 1,
            content: "eyes".into()
        }
        .safe_to_repeat());
    }

    #[test]
    fn replies_say_what_came_of_it_and_quote_nothing_live() {
        let reply = |outcome| comment_reply(&record(outcome));
        assert_eq!(
            reply(CommentOutcome::Queued { sent_back: false }),
            "Queued for T-7's next run."
        );
        assert_eq!(
            reply(CommentOutcome::Steered {
                command: "cancel".into(),
                column: Column::Cancelled
            }),
            "T-7 cancelled."
        );
        assert_eq!(
            reply(CommentOutcome::Status {
                column: Column::InReview,
                attempts: 2,
                max_attempts: 3,
                needs_human: Some("ask @octocat about #12".into()),
                pull_request: Some("acme/app#31".into()),
            }),
            "T-7 is in review, attempt 2 of 3. It needs a human: ask @\u{200B}octocat about #\u{200B}12. \
             Pull request: acme/app#31."
        );
        let unknown = reply(CommentOutcome::Unknown {
            given: "`@everyone`".into(),
        });
        assert_eq!(
            unknown,
            "`/pidevops @\u{200B}everyone` is not a command; the commands are retry, cancel, approve, status."
        );
        assert!(reply(CommentOutcome::Unknown {
            given: String::new()
        })
        .contains("one of retry"));
        assert_eq!(
            reply(CommentOutcome::NoTask {
                why: "closes #3".into()
            }),
            "No task: c\u{200B}loses #\u{200B}3."
        );
    }
}

#[test]
fn a_question_is_asked_where_the_task_came_from_once_per_episode() {
    use crate::tasks::{
        ApprovalPolicy, Command, GithubRef, LinearIssue, Links, MaxAttempts, NewTask, Priority,
        Reason, RetryCause, RunId, Spec, TaskEvent,
    };
    let repo: crate::tasks::RepoName = "acme/app".parse().unwrap();
    let new = NewTask {
        id: "T-8".parse().unwrap(),
        repo: repo.clone(),
        spec: Spec::new("Refund in the right currency", "", "").unwrap(),
        priority: Priority::Normal,
        links: Links {
            github_issue: Some(GithubRef::new(repo.clone(), 31).unwrap()),
            linear_issue: Some(LinearIssue::new(uuid::Uuid::from_u128(6), "ENG-8").unwrap()),
            ..Links::default()
        },
        approval: ApprovalPolicy::Auto,
        max_attempts: MaxAttempts::new(3).unwrap(),
        ticket_version: None,
        agent: None,
        family: Default::default(),
    };
    let (task, _) = apply(None, Command::Create(Box::new(new)));
    let run = RunId(uuid::Uuid::from_u128(2));
    let (task, _) = apply(Some(task), Command::Start { run });
    let (task, asked) = apply(
        Some(task),
        Command::Retry {
            cause: RetryCause::AgentAsked { run },
            reason: Reason::summarize("Which currency, @octocat? See #12."),
        },
    );
    let flag = asked
        .iter()
        .find(|e| matches!(e, TaskEvent::FlaggedNeedsHuman { .. }))
        .expect("the question flags the task");
    let retried = asked
        .iter()
        .find(|e| matches!(e, TaskEvent::Retried { .. }))
        .unwrap();
    let config = policy::PolicyConfig {
        telegram_chats: vec![-100],
        ..Default::default()
    };

    // Linear: the retry ends nothing (no `error`); the flag is one elicitation saying how to answer.
    assert!(policy::linear(retried, &task, Some("s-1"), Some(run), "e-1", &config).is_empty());
    let linear = policy::linear(flag, &task, Some("s-1"), Some(run), "e-2", &config);
    let ask = linear
        .iter()
        .find_map(|r| match &r.action {
            Action::LinearActivity { content, .. } => Some((r.key.clone(), content.clone())),
            _ => None,
        })
        .expect("an activity");
    assert_eq!(ask.0, "linear:activity:e-2");
    assert_eq!(ask.1["type"], "elicitation");
    let body = ask.1["body"].as_str().unwrap();
    assert!(
        body.contains("the agent asks:\n\n> Which currency"),
        "{body}"
    );
    assert!(body.contains("Reply in this session"), "{body}");

    // GitHub: a comment on the issue, the agent's words made inert, how to answer with the bot's name.
    let github = policy::github_question(
        &task,
        &Reason::summarize("Which currency, @octocat? See #12."),
        true,
        "e-2",
        Some("pidevops-bot"),
        at(0),
    )
    .expect("a comment on the issue");
    assert_eq!(github.key, "github:comment:T-8:ask:e-2");
    let Action::GithubComment { number, body, .. } = &github.action else {
        panic!("{github:?}")
    };
    assert_eq!(*number, 31);
    assert!(body.contains("asks:\n\n> Which currency"), "{body}");
    assert!(
        !body.contains("@octocat"),
        "no mention from the agent: {body}"
    );
    assert!(body.contains("mentioning @pidevops-bot"), "{body}");
    assert!(body.ends_with(&marker(&github.key)), "{body}");

    // Telegram: the question with a reply prompt (no buttons: one markup per message).
    let telegram = policy::telegram(flag, &task, "e-2", &config.telegram_chats);
    assert_eq!(telegram.len(), 1);
    let Action::TelegramSend {
        html,
        buttons,
        reply_prompt,
        ..
    } = &telegram[0].action
    else {
        panic!("{telegram:?}")
    };
    assert!(html.contains("the agent asks: Which currency"), "{html}");
    assert!(html.contains("Reply to this message to answer"), "{html}");
    assert!(buttons.is_empty());
    assert_eq!(reply_prompt.as_deref(), Some("Your answer for T-8"));
}

#[test]
fn named_agent_configuration_is_listed_in_the_pull_request_and_its_paths_stay_inert() {
    assert_eq!(github::agent_config_section(&[]), "");
    let section = github::agent_config_section(&[
        ".claude/settings.json".to_owned(),
        ".github/workflows/x`\n## Fixes #1 @acme/everyone.yml".to_owned(),
    ]);
    assert!(
        section.starts_with("\n## Agent and hook configuration\n"),
        "{section}"
    );
    assert!(
        section.contains("\n- `.claude/settings.json`\n"),
        "{section}"
    );
    // One list line per path: a path's backtick or line break cannot end its code span or start a heading.
    let lines: Vec<&str> = section.lines().filter(|l| l.starts_with("- ")).collect();
    assert_eq!(lines.len(), 2, "{section}");
    assert!(!section.contains("\n## Fixes"), "{section}");
    assert!(
        !section.contains("Fixes #1"),
        "closing keyword made inert: {section}"
    );
}
