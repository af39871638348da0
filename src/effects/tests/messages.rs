//! What reaches people: Telegram messages and bot commands, Linear comments and session activities, a plan's
//! proposal, a question asked where its task came from.

use super::*;
use crate::tasks::{GITHUB_ISSUE, LINEAR_ISSUE};

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
    use crate::board::Steer;
    use crate::providers::telegram::effects::bot::{parse, BotCommand};
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

#[test]
fn linear_hears_each_step_as_comments_or_as_session_activities() {
    use crate::tasks::{Command, LinearIssue, Links, Reason, RunId, Spec};
    let (task, started) = started_task(
        "T-4",
        Spec::new("Fix it", "", "").unwrap(),
        Links::default().with(
            LINEAR_ISSUE,
            &LinearIssue::new(uuid::Uuid::from_u128(5), "ENG-4").unwrap(),
        ),
        1,
    );
    let run = RunId(uuid::Uuid::from_u128(1));
    let config = policy::PolicyConfig::default();
    let keys = |requests: Vec<Request<LinearAction>>| -> Vec<String> {
        requests.into_iter().map(|r| r.key).collect()
    };
    let linear = |event, session| {
        policy::linear(
            event,
            &task,
            session,
            Some(run),
            "e-1",
            &config,
            &policy::LinearStates::default(),
        )
    };

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
    let asks = policy::linear(
        &flagged[0],
        &flagged_task,
        None,
        Some(run),
        "e-2",
        &config,
        &policy::LinearStates::default(),
    );
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
        &policy::LinearStates::default(),
    );
    assert_eq!(
        keys(ends),
        [format!("linear:activity:{run}:end")],
        "a cancel ends the attempt under way, keyed by its run"
    );
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
    let TelegramAction::Send { html, buttons, .. } = &requests[0].action else {
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
    let TelegramAction::Send { html, buttons, .. } = &auto[0].action else {
        panic!("a message")
    };
    assert!(
        html.contains("2 tasks, approved as proposed") && !html.contains("/reject"),
        "{html}"
    );
    assert!(buttons.is_empty());
}

#[test]
fn a_question_is_asked_where_the_task_came_from_once_per_episode() {
    use crate::tasks::{
        Command, GithubRef, LinearIssue, Links, Reason, RetryCause, RunId, Spec, TaskEvent,
    };
    let repo: crate::tasks::RepoName = "acme/app".parse().unwrap();
    let (task, _) = started_task(
        "T-8",
        Spec::new("Refund in the right currency", "", "").unwrap(),
        Links::default()
            .with(GITHUB_ISSUE, &GithubRef::new(repo.clone(), 31).unwrap())
            .with(
                LINEAR_ISSUE,
                &LinearIssue::new(uuid::Uuid::from_u128(6), "ENG-8").unwrap(),
            ),
        2,
    );
    let run = RunId(uuid::Uuid::from_u128(2));
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
    let config = policy::PolicyConfig::default();
    let telegram_chats = [-100];

    // Linear: the retry ends nothing (no `error`); the flag is one elicitation saying how to answer.
    assert!(policy::linear(
        retried,
        &task,
        Some("s-1"),
        Some(run),
        "e-1",
        &config,
        &policy::LinearStates::default()
    )
    .is_empty());
    let linear = policy::linear(
        flag,
        &task,
        Some("s-1"),
        Some(run),
        "e-2",
        &config,
        &policy::LinearStates::default(),
    );
    let ask = linear
        .iter()
        .find_map(|r| match &r.action {
            LinearAction::Activity { content, .. } => Some((r.key.clone(), content.clone())),
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
    let GithubAction::Comment { number, body, .. } = &github.action else {
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
    let telegram = policy::telegram(flag, &task, "e-2", &telegram_chats);
    assert_eq!(telegram.len(), 1);
    let TelegramAction::Send {
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
